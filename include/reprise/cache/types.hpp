// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The vocabulary of the cache façade: ids, options, the plans it hands to an engine, and its metrics
/// (`cache_metrics`, generated in metrics.hpp).

#include <reprise/cache/metrics.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/state_keys.hpp>
#include <reprise/keys/remote_keys.hpp>
#include <reprise/policy/policies.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

namespace reprise {

/// Block sizes the cache is built for. The hot loops (hashing, copying and comparing full blocks) are
/// instantiated for each with B as a compile-time constant; any other block size is `unsupported_config`.
inline constexpr std::uint32_t supported_block_sizes[] = {8, 16, 32, 64, 128, 256};

constexpr bool is_supported_block_size(std::uint32_t b) noexcept {
  for (std::uint32_t s : supported_block_sizes)
    if (s == b) return true;
  return false;
}

/// The most tokens one sequence may hold with block size `b`: whole blocks within the 32-bit position
/// range, (2^32 - 1) rounded down to a multiple of `b`. A prompt or an `extend` beyond it is `out_of_range`.
constexpr std::uint32_t max_sequence_tokens(std::uint32_t b) noexcept {
  return b == 0 ? 0 : std::numeric_limits<std::uint32_t>::max() / b * b;
}

/// The step numbers a cache can complete: `step_complete(n)` takes n <= max_epoch. Blocks and slots given
/// up while step n is scheduled carry the tag n + 1, which must not wrap.
inline constexpr epoch_t max_epoch = std::numeric_limits<epoch_t>::max() - 2;

/// The five numbers the cache reads from a model (from `model_config` or a `hybrid_model` type).
struct cache_geometry {
  std::uint32_t block_size = 0;       ///< tokens per KV block (B)
  std::uint32_t alignment = 0;        ///< snapshots sit at multiples of it: lcm(B, every chunk size)
  std::size_t bytes_per_kv_block = 0; ///< one block id, over every attention layer (metrics only)
  std::size_t bytes_per_snapshot = 0; ///< every recurrent layer's state (the snapshot budget's unit)
  bool has_recurrent = false;
  friend constexpr bool operator==(const cache_geometry&, const cache_geometry&) = default;
};

/// Construction options of a `prefix_cache`.
struct cache_options {
  /// KV blocks of the engine's pool; block ids handed out are in [0, kv_blocks). In [1, max_pool_ids].
  std::uint32_t kv_blocks = 0;
  /// Live sequences at most (admitted and not yet released). In [1, max_pool_ids].
  std::uint32_t max_sequences = 256;
  /// Bytes the engine sets aside for recurrent-state snapshots (hybrid models with `snapshot_restore`):
  /// the cache uses floor(budget / bytes per snapshot) slots, at most `max_pool_ids`. Below one snapshot is
  /// an error (`budget_too_small`), never a silent 0 % hit rate. Ignored by the other policies.
  std::size_t snapshot_budget_bytes = 0;
  /// Snapshots unused for more than this many completed steps are evicted (0: no TTL).
  std::uint64_t snapshot_ttl_steps = 0;
  /// The most snapshots kept along one root-to-leaf path of the prefix tree (0: no cap). Captures beyond it
  /// are refused, shallowest first, so the deepest ones survive.
  std::uint32_t max_snapshots_per_path = 0;
  /// Capture interval in tokens for `policy::every_interval` (a runtime `every<I>`); must be a multiple of
  /// the model's alignment unit. Ignored by other capture policies.
  std::uint32_t capture_interval = 0;
  /// Hasher seed. Empty: a random per-cache seed (the default for `xxh3_hasher`). Set it for reproducible
  /// keys, e.g. with `sha256_hasher` across processes.
  std::optional<std::uint64_t> hasher_seed{};
  /// Share full blocks between prompts admitted in the same step (`policy::block_sharing` only, i.e.
  /// attention-only models; with any other policy `create` returns `unsupported_config`: a recurrent
  /// state's prefill cannot be skipped without a snapshot).
  ///
  /// Off, a prompt shares only published blocks: two prompts admitted in one step that share a prefix both
  /// compute it. On, `admit` continues the verified lookup (same key, parent, tokens, class and extra keys
  /// as for a published block; at most floor((L - 1) / B) blocks) into the full prompt blocks that
  /// sequences admitted while the current step is scheduled will compute and have not committed yet, their
  /// *writers*. Such a block is shared like a published one: it is in the first `shared_blocks` of the
  /// table, `kv_matched_tokens` and `usable_tokens` include it, and its prefill is skipped.
  ///
  /// Precondition, the engine's: a sharer reads a shared block only after its writer's KV for it has
  /// landed. It does when both run in the same forward pass of the step, in which every layer writes the
  /// KV of the whole batch before its attention reads (vLLM's and SGLang's execution model), or the writer
  /// runs in an earlier pass of the step; it does not when the sharer runs in an earlier pass, or the
  /// writer's chunked prefill stops before the block. The step's commits come before its `step_complete`
  /// (the documented flow).
  ///
  /// What the cache enforces: a block counts as written when its writer's first commit covers it and comes
  /// in the step the writer was admitted in. Until every block a sharer shares is written, the sharer's
  /// `commit` returns `unwritten_blocks` and changes nothing (commit in admission order: writers first).
  /// When a shared block is left unwritten, because its writer's first commit stops short of it (a chunked
  /// prefill), the writer is released or finished before committing, or the step completes first, each of
  /// its sharers keeps failing to commit and must be released: its KV was computed from a block nobody
  /// wrote, so an engine uses a sharer's output only once its commit succeeded. No block shared this way is
  /// published, and no sharer commits KV computed from it, unless its writer wrote it; once a writer's window
  /// closes (at its first commit, its release, or the end of the step), its blocks left unwritten, and those
  /// of its broken sharers, are offered to no later prompt.
  bool share_in_step = false;
  /// `policy::decode_checkpoints`: during decode, a snapshot every this many tokens (at absolute multiples
  /// of it; a multiple of the alignment unit). 0: none.
  std::uint32_t decode_checkpoint_interval = 0;
  /// `policy::decode_checkpoints`: a sequence keeps its newest this many checkpoints (>= 1); publishing
  /// one more drops its oldest.
  std::uint32_t decode_checkpoints_per_sequence = 2;
  /// `policy::host_tier`: pinned host memory the engine sets aside for KV blocks offloaded from the GPU pool;
  /// the cache uses floor(budget / bytes per KV block) host slots, at most `max_pool_ids`. Below one block is
  /// `budget_too_small`. Without a host tier a non-zero value is `unsupported_config`.
  std::size_t host_kv_budget_bytes = 0;
  /// `policy::host_tier`: host memory for offloaded snapshots, floor(budget / bytes per snapshot) slots; 0
  /// keeps no snapshot on the host (models without recurrent layers need none). Without a host tier a
  /// non-zero value is `unsupported_config`.
  std::size_t host_snapshot_budget_bytes = 0;
  /// `policy::remote_tier`: how the fleet names what the remote store holds, any `content_key_source`
  /// (`o.remote_keys = &keys;`; <reprise/keys/content_key.hpp> has `content_keyer`, the SHA-256 derivation of
  /// docs/key-format.md). The engine keeps it alive as long as the cache. Required with a remote tier
  /// (`invalid_argument`), `unsupported_config` without one.
  remote_keys_ref remote_keys{};
  /// `policy::remote_tier`: snapshots `prefetch` asks the store for per prompt, the deepest positions on the
  /// alignment grid past what local tiers restore (>= 1).
  std::uint32_t remote_snapshot_candidates = 2;
  /// `policy::remote_tier`: write-through. Every prefill-exact full block and prefill-exact snapshot is put
  /// in the store from GPU memory (`remote_put::device`) once the step that computed it completed, so the
  /// fleet's other engines find a prefix while the engine that computed it still holds it; what the host
  /// tier later evicts is then not put again. Off (write-back): values reach the store only when the host
  /// tier evicts them. Without a remote tier, `true` is `unsupported_config`.
  bool remote_write_through = false;
  /// `policy::remote_tier` with a policy that captures turn ends and accepts decode continuations
  /// (`policy::chat`): every turn end also goes to the store (`remote_item::turn_end`: the decode-continuation
  /// snapshot and the partial block, linked to the blocks of the chain past its last prefill-exact one, which
  /// are values of their own, each put once: remote_tier.hpp), put from GPU memory once the step that
  /// captured it completed, whatever the write mode; and `prefetch`, given what a `probe` found, fetches the
  /// deepest turn end under the prompt whose links the store holds, with those links (docs/tiers.md).
  /// Another engine then restores the conversation where its writer left it, bitwise as if the session had
  /// stayed alive there. Off, turn ends never leave the engine. `unsupported_config` with another policy or
  /// without a remote tier.
  bool remote_turn_ends = false;
  /// `remote_turn_ends`: names this engine's computations in the turn ends it writes (each block with the
  /// serial this engine gave it), so that a reader holding some of a conversation's decode-filled blocks
  /// uses a turn end only if those blocks are the same computation as the turn end's. Unique within a fleet;
  /// 0 (the default): drawn at random when the cache is created.
  std::uint64_t remote_writer_id = 0;
  /// Which idle snapshot goes when a capture needs a slot and none is free (cache/snapshot_eviction.hpp):
  /// `policy_default` keeps the policy's eviction option (`policy::lru_eviction` unless it names another).
  policy::snapshot_eviction snapshot_eviction = policy::snapshot_eviction::policy_default;
  /// `snapshot_eviction::cost_aware`: idle snapshots examined per eviction, oldest first, in [1, 64]
  /// (0: the policy's window, 8 under `lru_eviction`; larger values are clamped to 64).
  std::uint32_t eviction_window = 0;
  /// The prefill cost model cost-aware eviction values snapshots by; zero: derived from the model's layer
  /// shapes by `create` (`prefill_cost_of`).
  policy::prefill_cost prefill_cost{};
  /// A victim chooser of the caller's, used instead of the built-in rule (superseded snapshots still go
  /// first); it sees the same window of candidates. Empty (the default): none.
  policy::snapshot_chooser snapshot_chooser{};
  /// Report what this cache holds to a fleet router (<reprise/routing/state_router.hpp>): given a key source
  /// (`routing::fleet_keys`, kept alive by the engine as long as the cache), every full KV block and every
  /// snapshot that GPU memory or the host tier comes to hold, or no longer holds anywhere, is an event, taken
  /// with `take_state_events` (once per step; cache/state_events.hpp). Empty (the default): no events, no cost.
  state_keys_ref state_events{};
};

/// What a remote value holds: a KV block (a host KV unit; a prefill-exact block, or a turn end's continuation
/// block), a snapshot (a host snapshot unit), or a conversation's turn end: its snapshot (a host snapshot
/// unit) with its partial block (a host KV unit), in one value (`cache_options::remote_turn_ends`).
enum class remote_item : std::uint8_t { block = 0, snapshot = 1, turn_end = 2 };

/// In a turn end's `kv_units`: a part of the payload with no unit. In a put, zero bytes (a turn end at a block
/// boundary has no partial block, and its value keeps the place of one, so that its size follows from its
/// key); in a fetch, bytes the engine discards.
inline constexpr std::uint32_t no_unit = 0xffffffffu;

/// A value for the remote store (`policy::remote_tier`): host unit `unit` (of the KV pool for a block, the
/// snapshot pool for a snapshot; a GPU unit when `device`) under content key `key`, with `header`, the bytes a fetch must return
/// unchanged (format, item, class, position, the key, the parent's key, the tokens). The spans stay valid
/// until the next `take_transfers`.
///
/// A turn end (`remote_item::turn_end`, always `device`): the payload is the GPU KV blocks `kv_units` in
/// order (one: its partial block, or `no_unit`: zero bytes) followed by GPU snapshot slot `unit`. Its
/// continuation blocks are puts of their own (`remote_item::block`, from GPU memory), listed before it.
struct remote_put {
  remote_item item = remote_item::block;
  std::uint32_t unit = 0;
  content_key key{};
  std::span<const std::byte> header{};
  /// Write-through (`cache_options::remote_write_through`): `unit` is a GPU KV block or GPU snapshot slot,
  /// whose bytes were complete when the step that wrote them completed; otherwise a host unit.
  bool device = false;
  /// A turn end's KV blocks, in payload order; empty for a block or a snapshot.
  std::span<const std::uint32_t> kv_units{};
};

/// A fetch `prefetch` planned: the engine gets `key` from the store into host unit `unit` (KV pool for a
/// block, snapshot pool for a snapshot) and reports `fetched(item, unit, header)` with the header the store
/// returned, or an empty one for a miss. `header_bytes` is its expected size (the payload is one unit).
///
/// A turn end (`remote_item::turn_end`): the payload is `kv_units.size()` KV units (one: its partial block)
/// then one snapshot unit; the engine scatters it into host KV units `kv_units` in order (skipping `no_unit`
/// parts) and host snapshot unit `unit`, and reports `fetched(remote_item::turn_end, unit, header)`.
/// `header_bytes` is then the most it can be (the partial block's length is in the header). Its links, the
/// continuation blocks this engine lacks, are block fetches of their own in the same plan, reported in any
/// order; the turn end is kept only once every one has reported well formed.
struct remote_fetch {
  remote_item item = remote_item::block;
  std::uint32_t unit = 0;
  content_key key{};
  std::uint32_t header_bytes = 0;
  /// A turn end's host KV units, in payload order; empty for a block or a snapshot.
  std::span<const std::uint32_t> kv_units{};
};

/// Bytes of the payload of a value of `item` with `kv_units` KV blocks: one unit for a block or a snapshot;
/// a turn end's `kv_units` KV units (its partial block) and its snapshot.
constexpr std::uint64_t remote_payload_bytes(remote_item item, std::size_t kv_units, std::uint64_t bytes_per_kv_block,
                                             std::uint64_t bytes_per_snapshot) noexcept {
  return item == remote_item::block      ? bytes_per_kv_block
         : item == remote_item::snapshot ? bytes_per_snapshot
                                         : kv_units * bytes_per_kv_block + bytes_per_snapshot;
}

/// What `prefetch` planned: the spans stay valid until the next `prefetch`.
struct fetch_plan {
  std::span<const remote_fetch> fetches{};
  /// Blocks past the prompt's match in GPU and host memory that are fetched (the first fetches): the
  /// prefill-exact chain, not a turn end's continuation blocks.
  std::uint32_t blocks = 0;
};

/// A key `probe` lists: a value a `prefetch` of the prompt could fetch, if the store has it.
struct remote_probe {
  remote_item item = remote_item::block;
  content_key key{};
};

/// What `probe` listed: block keys in chain order, then snapshot keys deepest first, then
/// (`cache_options::remote_turn_ends`) turn-end keys deepest first and the continuation blocks they may link
/// to (`remote_item::block`). The span stays valid until the next `probe` or `prefetch`.
struct probe_plan {
  std::span<const remote_probe> keys{};
};

/// One unit moved between tiers: unit `src` of the source pool into unit `dst` of the destination pool (a
/// unit is one KV block, or one snapshot slot, across every layer's pool).
struct unit_move {
  std::uint32_t src = 0;
  std::uint32_t dst = 0;
  friend constexpr bool operator==(const unit_move&, const unit_move&) = default;
};

/// The bytes the engine moves between the GPU and the host tier for what the cache decided since the
/// previous `take_transfers` (`policy::host_tier`). Issue them, in this order, before any other work those
/// decisions planned (restores, copy-on-write, prefill, decode), on the stream that work runs on:
///   0. `remote_puts` (`policy::remote_tier`): copy out the host units the host tier evicted (and, with
///      write-through, the GPU units written in completed steps), for the store;
///   1. `kv_offload` and `snapshot_offload` (device to host): what the GPU pools evicted; the GPU units are
///      handed out again in the same decisions, so their old bytes must be read first;
///   2. `kv_onboard` (host to device): cached blocks found in the host tier, copied into the GPU blocks the
///      block tables name (and a turn end's partial block, into the `block_table[shared_blocks]` it
///      continues in).
/// Host slots read by an onboard or a restore are not reused before the step that read them completes, so
/// transfers of later steps never overwrite bytes still to be read.
struct transfer_plan {
  std::span<const unit_move> kv_offload{};       ///< GPU KV block -> host KV slot
  std::span<const unit_move> snapshot_offload{}; ///< GPU snapshot slot -> host snapshot slot
  std::span<const unit_move> kv_onboard{};       ///< host KV slot -> GPU KV block
  /// `policy::remote_tier`, first of all: host units the host tier evicts, written to the store. The engine
  /// copies each unit's bytes (or sends them) before the offloads overwrite it.
  std::span<const remote_put> remote_puts{};
  bool empty() const noexcept {
    return kv_offload.empty() && snapshot_offload.empty() && kv_onboard.empty() && remote_puts.empty();
  }
};

/// What `admit` decided. Spans point into the cache and stay valid until the next non-const call.
struct admit_plan {
  /// Copy-on-write of a partial block kept at a turn's end: before the prefill the engine copies KV block
  /// `copy_src` into `copy_dst` (= block_table[shared_blocks]), which then holds the KV of
  /// [shared_blocks * B, kv_matched_tokens). `no_block` when nothing is copied. The source stays valid until
  /// the step after the sequence's first `commit` completes.
  block_id copy_src = no_block;
  block_id copy_dst = no_block;
  /// The sequence's block table: ceil(L / B) blocks. The first `shared_blocks` are shared, read-only and
  /// already hold the KV of tokens [0, kv_matched_tokens); the rest are the sequence's own.
  std::span<const block_id> block_table{};
  std::uint32_t shared_blocks = 0;
  /// Tokens whose KV is cached: shared full blocks, plus a copied partial block's tokens when `copy_src`
  /// is set (then not a multiple of B); at most L - 1. The engine writes KV only for positions >=
  /// kv_matched_tokens.
  std::uint32_t kv_matched_tokens = 0;
  /// Tokens whose prefill is skipped: the engine computes [usable_tokens, L). Always <= L - 1.
  std::uint32_t usable_tokens = 0;
  /// kv_matched_tokens - usable_tokens: tokens whose KV was cached but must be recomputed because no
  /// snapshot sits at a usable position (`snapshot_restore` only; 0 for `block_sharing`, and 0 for
  /// `memory_only`, which skips nothing by design).
  std::uint32_t tokens_lost_to_missing_snapshot = 0;
  /// With `snapshot_restore` and usable_tokens > 0: the slot to copy into the sequence's live recurrent
  /// state before prefill. `no_slot` otherwise (start from the zero state).
  slot_id restore_slot = no_slot;
  /// `policy::host_tier`: `restore_slot` names a slot of the host snapshot pool; the engine copies it from
  /// host memory into the live state (after the step's transfers).
  bool restore_from_host = false;
  /// `policy::host_tier`: full KV blocks of this prompt's match copied back from the host tier (the
  /// `kv_onboard` moves of the next `take_transfers` into this sequence's first `shared_blocks`); a turn
  /// end's partial block brought back with them is not counted. 0 without a host tier. Summed over admits it
  /// is `cache_metrics::host_blocks_onboarded`.
  std::uint32_t host_blocks_onboarded = 0;
  /// `policy::remote_tier`: of `host_blocks_onboarded`, the blocks whose host units the remote store filled
  /// (a `prefetch` fetched them). Summed over admits it is `cache_metrics::remote_blocks_onboarded`.
  std::uint32_t store_blocks_onboarded = 0;
  /// What restoring `restore_slot` and reusing the shared blocks is equivalent to: `prefill_exact` (a cold
  /// prefill, bitwise) unless a `decode_continuation` snapshot or block was reused (policies that accept it).
  exactness restore_exactness = exactness::prefill_exact;
  /// Captures for the prefill kernels, by increasing position, all in (usable_tokens, L], with
  /// `sequence == 0` (the engine sets its batch index).
  std::span<const capture_point> captures{};
};

/// What `extend` decided: the blocks appended to the block table for the new tokens (possibly none).
struct extend_plan {
  std::span<const block_id> new_blocks{};
  /// Index in the block table of new_blocks[0].
  std::uint32_t first_new_block = 0;
  /// `policy::decode_checkpoints`: at most one capture, at the sequence's new length. In the step that
  /// feeds the extended tokens, after the decode, the engine copies the live recurrent state (which has
  /// then folded in exactly `position` tokens) into `slot`, and lists `position` in the `written` of the
  /// `commit` that covers it. Empty when no checkpoint is due (or no slot is reusable).
  std::span<const capture_point> captures{};
};

/// What the engine knows about the turn `finish` ends.
struct finish_options {
  /// The conversation ends with this turn (the client closed it, a one-shot request): no turn-end capture is
  /// taken, and the snapshots this turn restored from or wrote while decoding go first when a slot is
  /// needed. Without this hint a finished conversation's last turn end holds its slot until it is the
  /// least recently used, which at about one slot per live conversation evicts live conversations' turn
  /// ends instead (docs/chat.md).
  bool last_turn = false;
};

/// What `finish` decided before releasing the sequence.
struct finish_plan {
  /// End-of-turn capture (`policy::end_of_turn`): copy the sequence's live recurrent state (which has
  /// folded in exactly `capture.position` tokens) into `capture.slot` in the current step. `no_slot` when
  /// no capture is taken. The snapshot is `decode_continuation` and becomes restorable once the current
  /// step is reported complete. When the position is not a multiple of B, the sequence's partial last block
  /// is kept with it (the engine must not overwrite it: the block id stays the cache's until evicted).
  capture_point capture{};
};

/// What `fork` decided. The destination shares every full block of the source; the partial last block,
/// if any, is copied: the engine copies block `copy_src` into `copy_dst` (its copy kernel).
struct fork_plan {
  std::span<const block_id> block_table{}; ///< the destination's table
  block_id copy_src = no_block;
  block_id copy_dst = no_block;
  /// True for models with recurrent layers: the engine must also copy the source's live recurrent state
  /// into the destination's (the cache does not own live states).
  bool copy_recurrent_state = false;
};


} // namespace reprise
