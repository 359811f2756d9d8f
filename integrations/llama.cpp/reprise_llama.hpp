// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Reprise inside llama-server: the adapter that maps a `prefix_cache`'s plans onto llama.cpp's memory.
///
/// Mapping (docs/llama.cpp.md):
///  - every slot has a KV stream of its own (llama.cpp's non-unified KV cache): its attention spans its own
///    cells only, and they stay in position order;
///  - a KV block id names a host copy of up to B cells (llama_reprise_kv_get: positions and every attention
///    layer's K and V bytes), taken when the block is published and dropped when the cache hands the id out
///    again; a hit copies the shared blocks' cells into the slot's stream (llama_reprise_kv_set), up to the
///    usable skip only, at the cells a cold prefill of the slot would have written; cells the slot's stream
///    still holds from its last request (the same blocks' bytes, nothing edited the stream since) stay in place;
///  - a snapshot slot is a host buffer holding llama_state_seq_get_data_ext(..., PARTIAL_ONLY) of the slot's
///    sequence: every recurrent layer's conv and SSM / delta-rule state, nothing of the attention memory;
///  - captures end a prompt piece: the server stops filling its batch at a capture position, and the state is
///    copied before the slot's next tokens are fed;
///  - a media chunk (`--mmproj`) is keyed by its media's hash at its first position; the server feeds a chunk
///    whole, so neither a capture nor a hit's skip ends inside one.
///
/// All calls come from the server's one scheduler thread. The header is C++17 (llama-server's dialect); the
/// adapter itself is built as C++20 with Reprise.

#include <llama.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace reprise::llama {

/// The policy a server runs with (`--reprise chat|strict`).
enum class mode : std::uint8_t { chat, strict };

/// Parses "chat" / "strict"; false for anything else.
bool parse_mode(const std::string& text, mode& out) noexcept;

/// Whether this machine can hold a snapshot budget of `bytes` (0: none asked for): not more than its
/// physical memory, nor than the process's address-space limit. False with `error` saying why.
bool check_budget(std::uint64_t bytes, std::string& error);

struct options {
  mode policy = mode::chat;
  std::uint64_t snapshot_budget_bytes = 0;
  /// Host memory for cached KV blocks beyond those of live requests (0: as much as the context's KV cache).
  std::uint64_t kv_budget_bytes = 0;
  std::uint32_t block_size = 32; // a multiple of the ubatches the exactness tests run (docs/llama.cpp.md)
  ggml_type type_k = GGML_TYPE_F16; ///< the KV cache's types (-ctk / -ctv): the bytes of a KV block
  ggml_type type_v = GGML_TYPE_F16;
};

/// An adapter a request computes with: llama-server's adapter index (`--lora`, in order), its scale (nonzero: an
/// adapter of scale 0 changes nothing) and the first position it applies to (an activated LoRA's invocation
/// start, 0 for a LoRA). The set a request computes with is part of its key: no request restores state computed
/// under other adapters or scales.
struct adapter_use {
  std::int32_t index = 0;
  float scale = 0.0f;
  std::int32_t from = 0;
};

/// A media chunk of a prompt (an image, an audio clip): prompt tokens [start, start + n_tokens), whose
/// embeddings llama-server feeds whole, never stopping inside the chunk. `id` is the media's hash (mtmd's chunk
/// id: the SHA-256 of the file's bytes); the chunk's positions are keyed by it, so only the same media at the
/// same position shares what lies past its start.
struct media_chunk {
  std::uint32_t start = 0;
  std::uint32_t n_tokens = 0;
  const char* id = nullptr;
};

/// What a server reports in its metrics.
struct adapter_stats {
  std::uint64_t prompt_tokens = 0;  ///< prompt tokens admitted
  std::uint64_t skipped_tokens = 0; ///< prompt tokens whose prefill was skipped
  std::uint64_t snapshot_restores = 0;
  std::uint64_t captures = 0;
  std::size_t snapshot_bytes_held = 0; ///< bytes in the host buffers of published snapshots
  std::uint64_t snapshot_budget_bytes = 0;
  std::uint32_t snapshot_slots = 0;
  std::uint32_t kv_cells_kept = 0;  ///< KV cells in the host copies of published blocks
  std::size_t kv_bytes_held = 0;    ///< bytes of those copies
  std::uint64_t kv_budget_bytes = 0; ///< host memory for cached KV blocks beyond those of live requests
  /// Cells a hit found still in the slot's stream from its last request (bitwise the blocks' copies), so kept
  /// there instead of copied in.
  std::uint64_t kv_cells_in_place = 0;
  /// Requests whose KV cells were not in position order at their end (docs/llama.cpp.md: the CPU flash
  /// attention kernel visits cells in cell order, so such a request may round differently from a cold run).
  std::uint64_t requests_out_of_order = 0;
  bool last_in_order = true; ///< the last finished request's cells were in position order
  std::uint32_t last_order_break = 0; ///< if not, the first position whose cell lies below an earlier one's
  std::uint32_t last_skipped = 0;     ///< the prompt tokens the last request skipped
};

/// What one slot's requests did (llama-server's `/slots`).
struct slot_figures {
  std::uint64_t restores = 0;
  std::uint64_t captures = 0;
  bool last_in_order = true;
};

/// One log line: "reprise: prompt tokens P skipped S restores R captures C snapshot bytes held H of budget B
/// (slots N) kept KV cells K (bytes M of budget G) in place I ...".
std::string to_string(const adapter_stats& s);

class server_cache {
public:
  virtual ~server_cache() = default;

  /// Builds the adapter for a loaded model and context. nullptr with `error` set when Reprise cannot cache
  /// the model (a layer kind it does not know, sliding-window attention, a KV stream shared by slots)
  /// or the options are invalid (a snapshot budget below one snapshot).
  static std::unique_ptr<server_cache> create(llama_context* ctx, const llama_model* model, const options& o,
                                              int n_slots, std::string& error);

  /// A new prompt on slot `slot`: clears the slot's sequence, admits the prompt, copies the cached blocks'
  /// cells into the slot's stream and restores the snapshot. `shared_end`: where the prompt's first user message starts (the end of a
  /// system prompt other conversations share; -1: not known): under `chat` the state there, rounded down to the
  /// block size, is snapshotted, so the next conversation over it restores there at its first meeting.
  /// `adapters`: the `n_adapters` adapters of nonzero scale the request computes with (none: the base model).
  /// `media`: the prompt's `n_media` media chunks in prompt order (their tokens in `prompt` may be any id; the
  /// chunk's hash keys them). The skip never ends inside a chunk, nor is a capture planned inside one.
  /// Returns the tokens whose prefill is skipped (< prompt.size()), or -1 with `error` set (the request then
  /// fails; the slot holds nothing).
  virtual std::int32_t admit(int slot, const llama_token* prompt, std::size_t n, std::int32_t shared_end,
                             const adapter_use* adapters, std::size_t n_adapters, const media_chunk* media,
                             std::size_t n_media, std::string& error) = 0;
  /// The next position at which the slot's prompt feeding must stop (a capture), or -1.
  virtual std::int32_t next_stop(int slot) const = 0;
  /// Before the slot's next tokens are fed: `n_fed` tokens of the slot have been decoded. Takes the captures
  /// due at `n_fed` and commits. False with `error` on a failure.
  virtual bool before_feed(int slot, std::uint32_t n_fed, std::string& error) = 0;
  /// A generated token the slot's sequence holds at position `pos` once decoded: the sampled token about to be
  /// fed (after `before_feed`), or a speculative draft token the target accepted. A position already extended
  /// (llama-server's checkpoint replay after rejected drafts feeds the same sampled token again) must hold the
  /// same token and is not extended twice; a rejected draft token is never extended.
  virtual bool extend(int slot, std::uint32_t pos, llama_token token, std::string& error) = 0;
  /// The slot's request ended: `n_fed` tokens were decoded (the last sampled token is never fed).
  virtual void finish(int slot, std::uint32_t n_fed, bool last_turn) = 0;
  /// The slot's request ended without a usable state (an error, a cancel): release without capturing.
  virtual void drop(int slot) = 0;
  /// Every decode issued so far has completed.
  virtual void step_complete() = 0;

  virtual adapter_stats stats() const = 0;
  /// One slot's figures: restores and captures of its requests so far, and whether its last request's KV
  /// cells were in position order.
  virtual slot_figures slot_stats(int slot) const = 0;
  virtual std::string describe() const = 0;
};

} // namespace reprise::llama
