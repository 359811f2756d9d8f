// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "reprise_llama.hpp"

#include <llama-reprise.h>
#include <reprise/reprise.hpp>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace reprise::llama {

bool parse_mode(const std::string& text, mode& out) noexcept {
  if (text == "chat") { out = mode::chat; return true; }
  if (text == "strict") { out = mode::strict; return true; }
  return false;
}

bool check_budget(std::uint64_t bytes, std::string& error) {
  if (bytes == 0) return true;
#if defined(__unix__) || defined(__APPLE__)
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && bytes / static_cast<std::uint64_t>(page) >= static_cast<std::uint64_t>(pages)) {
    error = std::to_string(bytes) + " bytes is more than this machine's memory (" +
            std::to_string(static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)) + " bytes)";
    return false;
  }
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && bytes >= as.rlim_cur) {
    error = std::to_string(bytes) + " bytes is more than this process's address-space limit (" +
            std::to_string(static_cast<std::uint64_t>(as.rlim_cur)) + " bytes, ulimit -v)";
    return false;
  }
#endif
  return true;
}

std::string to_string(const adapter_stats& s) {
  return "reprise: prompt tokens " + std::to_string(s.prompt_tokens) + " skipped " + std::to_string(s.skipped_tokens) +
         " restores " + std::to_string(s.snapshot_restores) + " captures " + std::to_string(s.captures) +
         " snapshot bytes held " + std::to_string(s.snapshot_bytes_held) + " of budget " +
         std::to_string(s.snapshot_budget_bytes) + " (slots " + std::to_string(s.snapshot_slots) + ") kept KV cells " +
         std::to_string(s.kv_cells_kept) + " (bytes " + std::to_string(s.kv_bytes_held) + " of budget " +
         std::to_string(s.kv_budget_bytes) + ") in place " + std::to_string(s.kv_cells_in_place) +
         " requests out of cell order " + std::to_string(s.requests_out_of_order) +
         " last in order " + (s.last_in_order ? std::string("yes")
                                              : "no from position " + std::to_string(s.last_order_break) +
                                                    " (skipped " + std::to_string(s.last_skipped) + ")");
}

namespace {

/// Faults a test injects to show that the exactness checks catch a wrong restore (REPRISE_LLAMA_FAULT):
/// "state" flips the top exponent bit of every float in the second half of the restored snapshot (the last
/// recurrent layer's SSM / delta-rule state: a state that survives the decay of the dozens of tokens a `strict`
/// hit recomputes after the restore), "kv" flips a bit of every byte in the second half of the first shared
/// block's copy (K and V bytes) as it is copied into the slot, "stale" keeps whatever cells the slot's stream
/// holds in place for a hit, whichever conversation left them (block ids and edits not checked).
/// The admit failures, each once, to show that a failed hit loses nothing: "lost" finds the first block a hit
/// copies in without its copy, "kv-refused" has libllama refuse the first copy into a slot's stream,
/// "restore-refused" the first snapshot restore. "adapters" keys every request as the base model's, whatever
/// adapters it computes with (as requests were keyed before adapters were part of the key); "media" keys a
/// prompt's media chunks by their placeholder tokens only, whatever media they hold.
enum class fault : std::uint8_t { none, state, kv, stale, lost, kv_refused, restore_refused, adapters, media };

fault fault_from_env() {
  const char* f = std::getenv("REPRISE_LLAMA_FAULT");
  if (!f) return fault::none;
  if (std::strcmp(f, "state") == 0) return fault::state;
  if (std::strcmp(f, "kv") == 0) return fault::kv;
  if (std::strcmp(f, "stale") == 0) return fault::stale;
  if (std::strcmp(f, "lost") == 0) return fault::lost;
  if (std::strcmp(f, "kv-refused") == 0) return fault::kv_refused;
  if (std::strcmp(f, "restore-refused") == 0) return fault::restore_refused;
  if (std::strcmp(f, "adapters") == 0) return fault::adapters;
  if (std::strcmp(f, "media") == 0) return fault::media;
  return fault::none;
}

std::string errc_text(reprise::errc e) { return std::string(reprise::to_string(e)); }

/// The `lora_id` of Reprise's extra keys for a set of adapters: 0 for none (the base model), else a nonzero
/// 64-bit hash of each adapter's index, scale bits and first position, in the order given (llama-server's adapter
/// order, so equal sets give equal keys).
std::uint64_t adapter_key(std::span<const adapter_use> adapters) {
  if (adapters.empty()) return 0;
  std::vector<std::uint32_t> words;
  words.reserve(3 * adapters.size());
  for (const adapter_use& a : adapters) {
    std::uint32_t scale = 0;
    std::memcpy(&scale, &a.scale, sizeof scale);
    words.insert(words.end(), {static_cast<std::uint32_t>(a.index), scale, static_cast<std::uint32_t>(a.from)});
  }
  const std::uint64_t h = XXH3_64bits(words.data(), words.size() * sizeof(std::uint32_t));
  return h != 0 ? h : 1;
}

/// The digest of a media chunk in Reprise's positional media keys: SHA-256 over its hash (mtmd's chunk id) and
/// its token count, so two chunks share a key only for the same media taking the same tokens.
std::array<std::byte, 32> chunk_digest(const media_chunk& c) {
  static constexpr char tag[] = "reprise/llama-media/v1";
  reprise::detail::sha256 h;
  h.update(tag, sizeof tag); // with its terminating zero byte
  h.u32(c.n_tokens);
  const std::size_t n = c.id ? std::strlen(c.id) : 0;
  h.u32(static_cast<std::uint32_t>(n));
  h.update(c.id, n);
  const std::array<std::uint8_t, 32> d = h.finish();
  std::array<std::byte, 32> out{};
  std::memcpy(out.data(), d.data(), out.size());
  return out;
}

/// The dtype whose size gives the bytes of the KV cache's K and V elements (llama.cpp's -ctk / -ctv), or none:
/// a quantized type, or K and V of different sizes (Reprise's KV shape has one element type).
std::optional<reprise::dtype> kv_type(ggml_type k, ggml_type v) {
  auto of = [](ggml_type t) -> std::optional<reprise::dtype> {
    switch (t) {
    case GGML_TYPE_F32: return reprise::dtype::f32;
    case GGML_TYPE_F16: return reprise::dtype::f16;
    case GGML_TYPE_BF16: return reprise::dtype::bf16;
    default: return std::nullopt;
    }
  };
  const auto a = of(k), b = of(v);
  if (!a || !b || reprise::size_of(*a) != reprise::size_of(*b)) return std::nullopt;
  return a;
}

/// The model's layer states as Reprise layer groups (consecutive equal shapes merged), or an error message. A
/// layer that runs attention and Mamba2 side by side (Falcon-H1) gives both: its KV in the attention memory
/// and its Mamba2 state in the snapshots.
std::optional<std::vector<reprise::layer_spec>> layers_of(const llama_model* model, const options& o,
                                                          bool& recurrent, std::string& error) {
  const std::uint32_t block_size = o.block_size;
  const int n = llama_reprise_model_layers(model, nullptr, 0);
  std::vector<llama_reprise_layer> ls(static_cast<std::size_t>(n));
  llama_reprise_model_layers(model, ls.data(), n);
  std::vector<reprise::layer_spec> groups;
  recurrent = false;
  bool any = false;
  for (const llama_reprise_layer& l : ls) {
    const int il = l.layer;
    reprise::layer_spec spec{reprise::kv_shape{}, 1};
    switch (l.kind) {
    case LLAMA_REPRISE_LAYER_NONE: continue;
    case LLAMA_REPRISE_LAYER_ATTENTION: {
      const std::optional<reprise::dtype> type = kv_type(o.type_k, o.type_v);
      if (!type) {
        error = std::string("Reprise accounts a KV cache of f32, f16 or bf16 with K and V of one size, not -ctk ") +
                ggml_type_name(o.type_k) + " -ctv " + ggml_type_name(o.type_v);
        return std::nullopt;
      }
      spec.shape = reprise::kv_shape{.kv_heads = l.kv_heads, .head_dim = l.head_dim, .block_size = block_size,
                                     .type = *type};
      break;
    }
    case LLAMA_REPRISE_LAYER_MAMBA2:
      // llama.cpp's ssm_scan and ssm_conv are per-token recurrences on the CPU (docs/llama.cpp.md): any
      // position is exact. Reprise's shapes take a chunk of 64 at least, so snapshots sit on that grid.
      spec.shape = reprise::mamba2_shape{.heads = l.ssm_heads, .head_dim = l.ssm_head_dim, .state_dim = l.ssm_state,
                                         .groups = l.ssm_groups, .conv_width = l.ssm_conv, .chunk = 64,
                                         .state_type = reprise::dtype::f32, .conv_type = reprise::dtype::f32};
      recurrent = true;
      break;
    case LLAMA_REPRISE_LAYER_GATED_DELTA:
      spec.shape = reprise::gated_delta_shape{.key_heads = l.ssm_groups, .value_heads = l.ssm_heads,
                                              .key_dim = l.ssm_state, .value_dim = l.ssm_head_dim,
                                              .conv_width = l.ssm_conv, .chunk = 64,
                                              .state_type = reprise::dtype::f32, .conv_type = reprise::dtype::f32};
      recurrent = true;
      break;
    default:
      error = "layer " + std::to_string(il) +
              " keeps a state Reprise cannot cache (sliding-window attention, Mamba1, RWKV, short conv or an "
              "architecture it does not know)";
      return std::nullopt;
    }
    any = true;
    if (!groups.empty() && groups.back().shape == spec.shape) {
      ++groups.back().count;
    } else {
      groups.push_back(spec);
    }
  }
  if (!any) {
    error = "the model has no attention or recurrent layer Reprise knows";
    return std::nullopt;
  }
  return groups;
}

template <class Policy>
class cache_impl final : public server_cache {
  using cache_t = reprise::prefix_cache<reprise::dynamic_model, Policy>;
  static constexpr bool restores = !std::is_same_v<Policy, reprise::policy::block_sharing>;

  /// A published block's cells, copied out of the stream of the slot that wrote them.
  struct block_copy {
    std::vector<std::uint8_t> bytes;
    std::uint32_t cells = 0; ///< positions [i * B, i * B + cells) of the block's table index i
    std::uint64_t generation = 0; ///< changes whenever the copy is taken or dropped
  };

  /// What a slot's stream holds of a block's copy: its first `cells` cells, bitwise (the slot copied them in,
  /// or the copy was taken from them), while the copy's generation is `generation`.
  struct resident_block {
    reprise::block_id id = reprise::no_block;
    std::uint64_t generation = 0;
    std::uint32_t cells = 0;
  };

  /// What a slot's stream holds once its request finished in order: the cells of positions [i * B, ...) equal
  /// `blocks[i]`'s copy, as long as nothing edited the stream since (`edits`: llama_reprise_kv_edits then).
  /// The next request on the slot keeps the cells it would otherwise copy in.
  struct slot_memory {
    bool valid = false;
    std::uint64_t edits = 0;
    std::vector<resident_block> blocks;
  };

  struct slot_state {
    bool live = false;
    reprise::seq_id seq = 0;
    std::vector<reprise::block_id> table;
    std::vector<reprise::token_id> tokens; ///< admitted prompt, then every extended token
    std::uint32_t prompt_len = 0;
    std::uint32_t committed = 0;
    std::uint32_t tagged = 0; ///< blocks [0, tagged) of the table have their host copies
    std::vector<reprise::capture_point> pending;
    /// The order of the sequence's KV cells, checked for positions [0, order_checked): the first position
    /// whose cell lies below an earlier position's (`ordered_until`, unbounded while none), and the highest
    /// cell seen. Cells never move while the request runs, so what was checked stays true.
    std::uint32_t order_checked = 0;
    std::uint32_t ordered_until = std::numeric_limits<std::uint32_t>::max();
    std::uint32_t top_cell = 0;
    std::vector<resident_block> resident; ///< this request's stream against the block copies (slot_memory)
    slot_figures figures; ///< kept across the slot's requests
  };

public:
  cache_impl(cache_t c, llama_context* ctx, const options& o, int n_slots, std::string text)
      : cache_(std::move(c)), ctx_(ctx), opts_(o), slots_(static_cast<std::size_t>(n_slots)),
        has_attention_(llama_reprise_kv_streams(ctx) > 0), text_(std::move(text)), fault_(fault_from_env()) {
    // a slot's new cells go above every cell its sequence holds while there is room: its stream's cells then
    // stay in position order even after a rollback frees cells in the middle
    if (has_attention_) llama_reprise_kv_alloc_above_seq(ctx_);
    blocks_.resize(cache_.kv_blocks());
    memory_.resize(static_cast<std::size_t>(n_slots));
    snapshots_.resize(cache_.snapshot_slots());
  }

  std::int32_t admit(int slot, const llama_token* tokens, std::size_t n_tokens, std::int32_t shared_end,
                     const adapter_use* adapters, std::size_t n_adapters, const media_chunk* media_chunks,
                     std::size_t n_media, std::string& error) override {
    const std::span<const llama_token> prompt(tokens, n_tokens);
    const std::span<const media_chunk> media(media_chunks, n_media);
    for (std::size_t i = 0; i < media.size(); ++i) {
      const media_chunk& c = media[i];
      // (a chunk without a hash, which mtmd gives only placeholder media, could not be told from other media)
      if (c.n_tokens == 0 || c.start >= n_tokens || c.n_tokens > n_tokens - c.start ||
          (i > 0 && c.start < media[i - 1].start + media[i - 1].n_tokens) || c.id == nullptr || *c.id == '\0') {
        error = "Reprise: media chunk " + std::to_string(i) + " (tokens " + std::to_string(c.start) + " to " +
                std::to_string(std::uint64_t{c.start} + c.n_tokens) + ") is empty, lies outside the prompt's " +
                std::to_string(n_tokens) + " tokens, overlaps the chunk before it or has no media hash";
        return -1;
      }
    }
    slot_state& s = slots_[static_cast<std::size_t>(slot)];
    if (s.live) drop(slot);
    const auto sid = static_cast<llama_seq_id>(slot);
    const slot_figures figures = s.figures;
    s = slot_state{};
    s.figures = figures;
    s.seq = next_seq_++;
    s.tokens.assign(prompt.begin(), prompt.end());
    s.prompt_len = static_cast<std::uint32_t>(prompt.size());
    std::vector<std::uint32_t> offsets;
    if constexpr (reprise::policy::policy_traits<Policy>::reads_capture_offsets) {
      // on the block grid: chat captures there off the alignment grid (the prefill is split there)
      const std::uint32_t at = shared_end > 0 ? static_cast<std::uint32_t>(shared_end) / opts_.block_size * opts_.block_size : 0;
      if (at > 0 && at <= s.prompt_len) offsets.push_back(at);
    }
    reprise::extra_keys keys;
    if (fault_ != fault::adapters) keys.lora_id = adapter_key(std::span<const adapter_use>(adapters, n_adapters));
    // Each chunk's media keys its first position: the blocks before it are shared with any prompt over the same
    // tokens, those from it on only with prompts holding the same media there (the chain carries it forward).
    std::vector<std::array<std::byte, 32>> digests;
    std::vector<reprise::media_item> items;
    if (fault_ != fault::media) {
      digests.reserve(media.size());
      items.reserve(media.size());
      for (const media_chunk& c : media) {
        digests.push_back(chunk_digest(c));
        items.push_back({.position = c.start, .digest = digests.back()});
      }
      keys.media = items;
    }
    auto plan = cache_.admit(s.seq, s.tokens, keys, offsets);
    if (!plan) {
      error = "Reprise: admit failed: " + errc_text(plan.error());
      return -1;
    }
    s.live = true;
    s.table.assign(plan->block_table.begin(), plan->block_table.end());
    const std::uint32_t b = opts_.block_size;
    // The cached prefix the slot skips: the plan's usable prefix, unless it ends inside a media chunk (the server
    // feeds a chunk whole, from its start). Then the KV cells are copied up to the chunk's start only, and a
    // recurrent state, which exists at the plan's point alone, is not restored: the slot computes from 0. Only an
    // attention-only model's hit (any block boundary) meets this: a recurrent model restores snapshots this
    // adapter captured, none inside a chunk, and a shared chunk start is the same media of the same token count,
    // so the chunk ends where it did. The cache's plan stands: what the slot recomputes below its usable prefix is
    // the same computation over the same tokens.
    std::uint32_t usable = plan->usable_tokens;
    bool restore = restores && plan->restore_slot != reprise::no_slot;
    for (const media_chunk& c : media) {
      if (c.start < usable && usable < c.start + c.n_tokens) {
        usable = restore ? 0 : c.start;
        restore = false;
        break;
      }
    }
    auto source = [&](std::uint32_t i) { return i < plan->shared_blocks ? s.table[i] : plan->copy_src; };
    // The cells of [0, usable) the slot's stream still holds from its last request (bitwise the blocks'
    // copies) stay where they are; a recurrent state then comes from the plan's snapshot.
    std::uint32_t keep = 0;
    slot_memory& m = memory_[static_cast<std::size_t>(slot)];
    const bool stale = fault_ == fault::stale;
    if (has_attention_ && m.valid && (stale || llama_reprise_kv_edits(ctx_, sid) == m.edits) &&
        (!restores || restore) && !corrupts()) {
      for (std::uint32_t i = 0; i * b < usable && i < m.blocks.size(); ++i) {
        const reprise::block_id src = source(i);
        const resident_block& r = m.blocks[i];
        const std::uint32_t n = std::min(b, usable - i * b);
        if (src == reprise::no_block || r.cells < n) break;
        if (!stale && (r.id != src || r.generation != blocks_[static_cast<std::size_t>(src)].generation)) break;
        keep = i * b + n;
      }
    }
    m.valid = false; // the stream changes from here on; finish records it again
    if (keep > 0) {
      llama_reprise_kv_seq_rm(ctx_, sid, keep);
    } else {
      llama_memory_seq_rm(llama_get_memory(ctx_), sid, -1, -1);
    }
    // Own blocks: whatever copies their ids named before are no longer the cache's.
    for (std::size_t i = plan->shared_blocks; i < s.table.size(); ++i) release_block(s.table[i]);
    // Copy the other cached cells of [0, usable) into the slot's stream: full shared blocks, then the partial
    // block the plan copies from. They land above the kept ones, in position order, as a cold prefill's would.
    // Either way the stream then holds each block's copy up to `usable` (s.resident).
    for (std::uint32_t i = 0; has_attention_ && i * b < usable; ++i) {
      const reprise::block_id src = source(i);
      const std::uint32_t n = std::min(b, usable - i * b);
      const block_copy* copy = src == reprise::no_block ? nullptr : &blocks_[static_cast<std::size_t>(src)];
      if (i * b >= keep) { // (a kept prefix ends on a block boundary, or at `usable` itself inside its last block)
        if (!copy || copy->cells < n || fires(fault::lost)) {
          error = "Reprise: " + std::to_string(usable) + " usable tokens but block " + std::to_string(i) +
                  " has no copy of its cells (the adapter lost track of a block)";
          return fail_admit(slot);
        }
        std::vector<std::uint8_t> faulty;
        const std::uint8_t* bytes = copy->bytes.data();
        if (fault_ == fault::kv && i == 0) {
          // the second half of the first block's copy (K and V bytes: the positions lie in its first bytes)
          // with a bit of every byte flipped
          faulty = copy->bytes;
          for (std::size_t k = faulty.size() / 2; k < faulty.size(); ++k) faulty[k] ^= 0x40;
          bytes = faulty.data();
        }
        if (fires(fault::kv_refused) ||
            !llama_reprise_kv_set(ctx_, sid, bytes, copy->bytes.size(), static_cast<int32_t>(copy->cells),
                                  static_cast<int32_t>(n))) {
          error = "Reprise: copying " + std::to_string(n) + " cached KV cells into slot " + std::to_string(slot) +
                  "'s stream failed";
          return fail_admit(slot);
        }
      }
      s.resident.push_back({src, copy->generation, n});
    }
    if constexpr (restores) {
      if (restore) {
        std::vector<std::uint8_t>& buf = snapshots_[static_cast<std::size_t>(plan->restore_slot)];
        std::vector<std::uint8_t> faulty;
        const std::uint8_t* data = buf.data();
        if (fault_ == fault::state && buf.size() >= 8) {
          faulty = buf;
          for (std::size_t i = faulty.size() - faulty.size() / 8 * 4; i + 4 <= faulty.size(); i += 4) faulty[i + 3] ^= 0x40;
          data = faulty.data();
        }
        if (buf.empty() || fires(fault::restore_refused) ||
            llama_state_seq_set_data_ext(ctx_, data, buf.size(), sid, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) != buf.size()) {
          error = "Reprise: restoring snapshot slot " + std::to_string(plan->restore_slot) + " failed";
          return fail_admit(slot);
        }
        ++stats_.snapshot_restores;
        ++s.figures.restores;
      }
    }
    stats_.kv_cells_in_place += keep;
    // (the cache's count: below it nothing is committed, whatever the slot recomputes there)
    s.committed = plan->usable_tokens;
    // Shared blocks have their copies already. Those past the usable skip are recomputed into the slot's
    // stream (llama.cpp writes KV for every token it decodes); their copies stay the first writer's.
    s.tagged = plan->shared_blocks;
    // A capture inside a media chunk is never taken (the state there never exists: the chunk is decoded
    // whole); the next commit past it drops it and frees its slot.
    for (const reprise::capture_point& c : plan->captures) {
      const bool inside = std::any_of(media.begin(), media.end(), [&](const media_chunk& m) {
        return c.position > m.start && c.position < std::int64_t{m.start} + m.n_tokens;
      });
      if (!inside) s.pending.push_back(c);
    }
    stats_.prompt_tokens += prompt.size();
    stats_.skipped_tokens += usable;
    stats_.last_skipped = usable;
    return static_cast<std::int32_t>(usable);
  }

  std::int32_t next_stop(int slot) const override {
    const slot_state& s = slots_[static_cast<std::size_t>(slot)];
    if (!s.live) return -1;
    for (const reprise::capture_point& c : s.pending)
      if (c.position > s.committed) return static_cast<std::int32_t>(c.position);
    return -1;
  }

  bool before_feed(int slot, std::uint32_t n_fed, std::string& error) override {
    slot_state& s = slots_[static_cast<std::size_t>(slot)];
    if (!s.live) return true;
    // What may be published: an attention-only model (`block_sharing`) publishes only what its prompts
    // prefilled: llama.cpp's CPU kernels give a decoded token's KV other bits than a prefilled one's
    // (docs/llama.cpp.md), and block_sharing has no exactness class to tell them apart. Decoded tokens are
    // extended, never committed.
    std::uint32_t publish = restores ? n_fed : std::min(n_fed, s.prompt_len);
    // Nor is anything computed once the sequence's cells left position order: the flash-attention kernel
    // folds cells in cell order, so those tokens' KV and every state after them carry other bits than a cold
    // prefill's (`strict`) or the never-ending session's (`chat`). They stay uncommitted: no block or snapshot
    // of them is published, and the request ends with `release` (no turn-end snapshot).
    publish = std::min(publish, in_order_until(slot, publish));
    if (publish <= s.committed) return true;
    std::vector<std::uint32_t> written;
    for (const reprise::capture_point& c : s.pending) {
      // the live state has folded n_fed tokens: a capture is due only there
      if (c.position == static_cast<std::int64_t>(n_fed) && n_fed == publish) {
        capture(slot, c.slot);
        written.push_back(n_fed);
      }
    }
    std::erase_if(s.pending, [&](const reprise::capture_point& c) { return c.position <= static_cast<std::int64_t>(n_fed); });
    auto r = cache_.commit(s.seq, publish, written);
    if (!r) {
      error = "Reprise: commit failed: " + errc_text(r.error());
      return false;
    }
    n_fed = publish;
    s.committed = n_fed;
    // Copy out the cells of every block that became full.
    const std::uint32_t b = opts_.block_size;
    const auto full = std::min<std::uint32_t>(n_fed / b, static_cast<std::uint32_t>(s.table.size()));
    for (; s.tagged < full; ++s.tagged) copy_block(slot, s.table[s.tagged], s.tagged * b, (s.tagged + 1) * b);
    return true;
  }

  bool extend(int slot, std::uint32_t pos, llama_token token, std::string& error) override {
    slot_state& s = slots_[static_cast<std::size_t>(slot)];
    if (!s.live) return true;
    const reprise::token_id t = token;
    // the last token fed again, not yet committed: a checkpoint replay after rejected draft tokens
    if (pos + 1 == s.tokens.size() && pos >= s.committed && s.tokens[pos] == t) return true;
    if (pos != s.tokens.size()) {
      error = "Reprise: token " + std::to_string(token) + " at position " + std::to_string(pos) + " but the sequence holds " +
              std::to_string(s.tokens.size()) + " tokens" + (pos < s.tokens.size() ? " (that position is extended already)" : "");
      return false;
    }
    auto plan = cache_.extend(s.seq, {&t, 1});
    if (!plan) {
      error = "Reprise: extend failed: " + errc_text(plan.error());
      return false;
    }
    s.tokens.push_back(t);
    for (reprise::block_id nb : plan->new_blocks) {
      release_block(nb);
      s.table.push_back(nb);
    }
    for (const reprise::capture_point& c : plan->captures) s.pending.push_back(c);
    return true;
  }

  void finish(int slot, std::uint32_t n_fed, bool last_turn) override {
    slot_state& s = slots_[static_cast<std::size_t>(slot)];
    if (!s.live) return;
    std::string ignored;
    if (n_fed > s.committed && !before_feed(slot, n_fed, ignored)) {
      drop(slot);
      return;
    }
    const bool ordered = in_order_until(slot, n_fed) >= n_fed;
    stats_.last_in_order = ordered;
    stats_.last_order_break = ordered ? 0 : s.ordered_until;
    s.figures.last_in_order = ordered;
    if (!ordered) ++stats_.requests_out_of_order;
    if (!ordered || (restores && s.committed < n_fed)) {
      // the state at n_fed was computed out of cell order, or past a block kept unpublished: nothing of it is kept
      (void)cache_.release(s.seq);
      s.live = false;
      return;
    }
    auto fin = cache_.finish(s.seq, {.last_turn = last_turn});
    if (fin && fin->capture.slot != reprise::no_slot) {
      capture(slot, fin->capture.slot);
      const std::uint32_t b = opts_.block_size;
      const auto pos = static_cast<std::uint32_t>(fin->capture.position);
      // The partial last block stays the cache's, kept with the snapshot.
      if (pos % b != 0 && pos / b < s.table.size() && pos / b >= s.tagged)
        copy_block(slot, s.table[pos / b], pos / b * b, pos);
    }
    s.live = false;
    if (has_attention_) {
      slot_memory& m = memory_[static_cast<std::size_t>(slot)];
      m.blocks = std::move(s.resident);
      m.edits = llama_reprise_kv_edits(ctx_, static_cast<llama_seq_id>(slot));
      m.valid = true;
    }
  }

  void drop(int slot) override {
    slot_state& s = slots_[static_cast<std::size_t>(slot)];
    memory_[static_cast<std::size_t>(slot)].valid = false;
    stats_.last_in_order = true; // nothing of the request is kept or compared
    s.figures.last_in_order = true;
    if (!s.live) return;
    (void)cache_.release(s.seq);
    s.live = false;
  }

  void step_complete() override { (void)cache_.step_complete(cache_.current_epoch()); }

  adapter_stats stats() const override {
    adapter_stats a = stats_;
    const auto& m = cache_.metrics();
    a.snapshot_slots = cache_.snapshot_slots();
    a.snapshot_budget_bytes = opts_.snapshot_budget_bytes;
    a.snapshot_bytes_held = static_cast<std::size_t>(m.snapshots_held) * snapshot_bytes_;
    a.kv_budget_bytes = opts_.kv_budget_bytes;
    return a;
  }

  slot_figures slot_stats(int slot) const override {
    if (slot < 0 || static_cast<std::size_t>(slot) >= slots_.size()) return {};
    return slots_[static_cast<std::size_t>(slot)].figures;
  }

  std::string describe() const override { return text_; }

private:
  /// A fault that makes a hit's result wrong (the in-place path is then not taken, so that every hit copies).
  bool corrupts() const { return fault_ == fault::state || fault_ == fault::kv; }

  /// Whether the injected failure `f` happens now: the first time only.
  bool fires(fault f) {
    if (fault_ != f) return false;
    fault_ = fault::none;
    return true;
  }

  /// Ends a failed admit: the slot's stream emptied, the sequence released (the request fails, the cache keeps
  /// what it had).
  std::int32_t fail_admit(int slot) {
    slot_state& s = slots_[static_cast<std::size_t>(slot)];
    llama_memory_seq_rm(llama_get_memory(ctx_), static_cast<llama_seq_id>(slot), -1, -1);
    (void)cache_.release(s.seq);
    s.live = false;
    return -1;
  }

  /// The first position below `n` whose KV cell lies below the cell of an earlier position of the slot's
  /// sequence (its cells are then out of position order from there on), or
  /// `std::numeric_limits<std::uint32_t>::max()` when [0, n) is in order. Checks only what is new since the
  /// last call; a model without attention layers has no cells and is always in order.
  std::uint32_t in_order_until(int slot, std::uint32_t n) {
    slot_state& s = slots_[static_cast<std::size_t>(slot)];
    if (!has_attention_ || n <= s.order_checked || s.ordered_until != std::numeric_limits<std::uint32_t>::max())
      return s.ordered_until;
    const auto sid = static_cast<llama_seq_id>(slot);
    const auto want = static_cast<int32_t>(n - s.order_checked);
    std::vector<std::uint32_t> cells(static_cast<std::size_t>(want));
    // (positions are token indices here: libllama addresses a sequence's cells by token index, which under M-RoPE
    // is not a cell's position)
    const int32_t got = llama_reprise_kv_cells(ctx_, sid, s.order_checked, n, cells.data(), want);
    // (a position without a cell, which only a deliberately wrong restore leaves, is not an order question)
    cells.resize(std::min(cells.size(), static_cast<std::size_t>(std::max(got, 0))));
    for (std::size_t j = 0; j < cells.size(); ++j) {
      const auto pos = static_cast<std::uint32_t>(s.order_checked + j);
      if (pos > 0 && cells[j] < s.top_cell) {
        s.ordered_until = pos;
        break;
      }
      s.top_cell = cells[j];
    }
    s.order_checked = n;
    return s.ordered_until;
  }

  void capture(int slot, reprise::slot_id dst) {
    const auto sid = static_cast<llama_seq_id>(slot);
    std::vector<std::uint8_t>& buf = snapshots_[static_cast<std::size_t>(dst)];
    buf.resize(llama_state_seq_get_size_ext(ctx_, sid, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY));
    const std::size_t n = llama_state_seq_get_data_ext(ctx_, buf.data(), buf.size(), sid, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    buf.resize(n);
    snapshot_bytes_ = std::max(snapshot_bytes_, n);
    ++stats_.captures;
    ++slots_[static_cast<std::size_t>(slot)].figures.captures;
  }

  /// Copies the slot's cells of positions [p0, p1) (block `id`, possibly partial) into the block's host copy.
  /// If they are not one cell per position, the block keeps no copy, and an admit that would share it fails its
  /// check instead of copying wrong cells.
  void copy_block(int slot, reprise::block_id id, std::uint32_t p0, std::uint32_t p1) {
    release_block(id);
    if (!has_attention_) return;
    block_copy& c = blocks_[static_cast<std::size_t>(id)];
    c.bytes.resize(llama_reprise_kv_size(ctx_, static_cast<int32_t>(p1 - p0)));
    const std::size_t n = llama_reprise_kv_get(ctx_, static_cast<llama_seq_id>(slot), p0, p1, c.bytes.data(),
                                               c.bytes.size());
    if (n == 0 || n != c.bytes.size()) {
      std::vector<std::uint8_t>().swap(c.bytes);
      return;
    }
    c.cells = p1 - p0; // (release_block gave the copy a new generation)
    stats_.kv_cells_kept += c.cells;
    stats_.kv_bytes_held += c.bytes.size();
    // the slot's stream holds these cells: the copy's, bitwise
    std::vector<resident_block>& r = slots_[static_cast<std::size_t>(slot)].resident;
    const std::uint32_t i = p0 / opts_.block_size;
    if (r.size() <= i) r.resize(i + 1);
    r[i] = {id, c.generation, c.cells};
  }

  void release_block(reprise::block_id id) {
    block_copy& c = blocks_[static_cast<std::size_t>(id)];
    ++c.generation;
    if (c.cells == 0) return;
    stats_.kv_cells_kept -= c.cells;
    stats_.kv_bytes_held -= c.bytes.size();
    std::vector<std::uint8_t>().swap(c.bytes);
    c.cells = 0;
  }

  cache_t cache_;
  llama_context* ctx_;
  options opts_;
  std::vector<slot_state> slots_;
  bool has_attention_; ///< the context has an attention memory (a model with attention layers)
  std::string text_;
  fault fault_;
  reprise::seq_id next_seq_ = 1;
  std::vector<block_copy> blocks_; ///< by block id
  std::vector<slot_memory> memory_; ///< by slot
  std::vector<std::vector<std::uint8_t>> snapshots_;
  std::size_t snapshot_bytes_ = 0;
  adapter_stats stats_;
};

template <class Policy>
std::unique_ptr<server_cache> make(const reprise::model_config& cfg, llama_context* ctx, options o,
                                   int n_slots, std::string text, std::string& error) {
  reprise::cache_options co;
  // Blocks for every slot's whole context (each slot's stream holds n_ctx / n_slots cells), and as many more
  // as the KV budget holds host copies of (by default as many as the context's cells).
  const std::uint32_t per_slot = (llama_n_ctx(ctx) / static_cast<std::uint32_t>(n_slots) + o.block_size - 1) / o.block_size;
  const std::size_t block_bytes = cfg.facts().bytes_per_kv_block;
  const std::uint64_t kv_budget = o.kv_budget_bytes != 0 ? o.kv_budget_bytes : std::uint64_t{llama_n_ctx(ctx)} / o.block_size * block_bytes;
  // (a model without attention keeps no KV: its blocks only name token ids, as many as the context's cells)
  const std::uint64_t cached = block_bytes == 0 ? llama_n_ctx(ctx) / o.block_size : kv_budget / block_bytes;
  if (std::uint64_t{per_slot} * static_cast<std::uint64_t>(n_slots) + cached > std::numeric_limits<std::uint32_t>::max() / 2) {
    error = "--reprise-kv-bytes " + std::to_string(kv_budget) + " is more KV blocks than Reprise counts (" +
            std::to_string(block_bytes) + " bytes each)";
    return nullptr;
  }
  co.kv_blocks = per_slot * static_cast<std::uint32_t>(n_slots) + static_cast<std::uint32_t>(cached);
  o.kv_budget_bytes = kv_budget;
  co.max_sequences = static_cast<std::uint32_t>(n_slots);
  co.snapshot_budget_bytes = static_cast<std::size_t>(o.snapshot_budget_bytes);
  // Every snapshot sits on a KV block (a full one, or a kept partial one), at most one of each exactness class
  // per block: slots past two per KV block are never used, so a larger budget is not spent on their records.
  const std::size_t per_snapshot = cfg.facts().bytes_per_snapshot;
  if (per_snapshot != 0 && co.snapshot_budget_bytes / per_snapshot > 2 * std::size_t{co.kv_blocks})
    co.snapshot_budget_bytes = 2 * std::size_t{co.kv_blocks} * per_snapshot;
  std::optional<reprise::result<reprise::prefix_cache<reprise::dynamic_model, Policy>>> made;
  try {
    made.emplace(reprise::prefix_cache<reprise::dynamic_model, Policy>::create(cfg, co));
  } catch (const std::bad_alloc&) {
    error = "not enough memory for Reprise's pools (" + std::to_string(co.kv_blocks) + " KV blocks, " +
            std::to_string(co.snapshot_budget_bytes / std::max<std::size_t>(per_snapshot, 1)) + " snapshot slots)";
    return nullptr;
  }
  auto& c = *made;
  if (!c) {
    error = "Reprise cannot cache this model with these options: " + errc_text(c.error());
    if (c.error() == reprise::errc::budget_too_small)
      error += " (--reprise-snapshot-bytes is below one snapshot of " +
               std::to_string(cfg.facts().bytes_per_snapshot) + " bytes)";
    return nullptr;
  }
  text += ", " + std::to_string(c->kv_blocks()) + " KV blocks of " + std::to_string(o.block_size) + " tokens (" +
          std::to_string(cfg.facts().bytes_per_kv_block) + " bytes; host copies of cached ones up to " +
          std::to_string(o.kv_budget_bytes) + " bytes), " +
          std::to_string(c->snapshot_slots()) + " snapshot slots, alignment " + std::to_string(c->alignment());
  return std::make_unique<cache_impl<Policy>>(std::move(*c), ctx, o, n_slots, std::move(text));
}

} // namespace

std::unique_ptr<server_cache> server_cache::create(llama_context* ctx, const llama_model* model, const options& o,
                                                   int n_slots, std::string& error) {
  if (n_slots < 1) {
    error = "Reprise needs one slot at least";
    return nullptr;
  }
  bool recurrent = false;
  auto groups = layers_of(model, o, recurrent, error);
  if (!groups) return nullptr;
  const bool attention = std::any_of(groups->begin(), groups->end(), [](const reprise::layer_spec& g) {
    return g.family() == reprise::state_family::kv_block;
  });
  if (attention && llama_reprise_kv_streams(ctx) < n_slots) {
    error = "Reprise needs a KV stream per slot (llama.cpp's KV cache without --kv-unified)";
    return nullptr;
  }
  if (attention && llama_reprise_kv_size(ctx, 1) == 0) {
    error = "Reprise cannot copy this KV cache's cells (a transposed V of a block-quantized type)";
    return nullptr;
  }
  auto cfg = reprise::model_config::make(*groups);
  if (!cfg) {
    error = "Reprise cannot describe this model's layers: " + errc_text(cfg.error());
    return nullptr;
  }
  std::string text = std::string("Reprise ") + (o.policy == mode::chat ? "chat" : "strict") + ": " +
                     std::to_string(groups->size()) + " layer groups";
  if (!recurrent) {
    if (o.policy == mode::chat) {
      // chat resumes a turn where it ended, decoded KV included; an attention-only model has only
      // block_sharing, which recomputes the turn's last partial block by prefill
      error = "--reprise chat needs a model with recurrent layers; use --reprise strict for an attention-only model";
      return nullptr;
    }
    return make<reprise::policy::block_sharing>(*cfg, ctx, o, n_slots, std::move(text), error);
  }
  if (o.snapshot_budget_bytes == 0) {
    error = "Reprise needs --reprise-snapshot-bytes for a model with recurrent layers (one snapshot is " +
            std::to_string(cfg->facts().bytes_per_snapshot) + " bytes)";
    return nullptr;
  }
  if (o.policy == mode::chat) return make<reprise::policy::chat>(*cfg, ctx, o, n_slots, std::move(text), error);
  return make<reprise::policy::strict>(*cfg, ctx, o, n_slots, std::move(text), error);
}

} // namespace reprise::llama
