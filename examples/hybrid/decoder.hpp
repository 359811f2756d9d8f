// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `decoder`: a small hybrid language model (embeddings, pre-norm layers of attention / Mamba2 / gated-delta
/// mixers each followed by a SwiGLU MLP, a final RMSNorm and an LM head) with seeded random weights, fp32 on
/// the host. It holds weights only; states live in engine-owned `kv_memory` and `state_memory` and are named
/// by block ids and slots, exactly as in a real engine.
///
/// One `forward` call computes a batch of sequences, each a run of consecutive tokens at its own absolute
/// position (`sequence_step`). Attention reads and writes KV through each sequence's block table; recurrent
/// mixers call the library's host kernels (chunked prefill with captures for `pass::prefill`, the recurrent
/// step for `pass::decode`) on the sequence's live slot.

#include "hybrid/batch.hpp"
#include "hybrid/config.hpp"
#include "hybrid/memory.hpp"

#include <reprise/errc.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace reprise::example {

class decoder {
public:
  /// Builds the model with weights drawn from `c.seed`.
  ///
  /// Errors: whatever `decoder_config::validate` reports.
  static result<decoder> make(const decoder_config& c);

  decoder(decoder&&) noexcept;
  decoder& operator=(decoder&&) noexcept;
  ~decoder();

  const decoder_config& config() const noexcept;

  /// Runs every layer over the tokens of `steps` (concatenated in `tokens`, in step order) and writes the
  /// logits of each step's last token into `logits` ([steps.size(), vocab]). KV entries of the computed
  /// positions are written into the blocks named by each block table; recurrent states advance in each
  /// step's live slot and are copied into capture slots on the way.
  ///
  /// Preconditions (checked in debug builds by the engine, not here: this is the inner loop): block tables
  /// cover the positions, slots are in range, captures lie in (start, start + count].
  /// Complexity: linear in tokens for MLP and recurrent layers; attention is linear in the context length
  /// per token.
  void forward(pass p, std::span<const token> tokens, std::span<const sequence_step> steps, kv_memory& kv,
               state_memory& states, std::span<float> logits) const;

private:
  struct impl;
  explicit decoder(std::unique_ptr<impl>);
  std::unique_ptr<impl> impl_;
};

} // namespace reprise::example
