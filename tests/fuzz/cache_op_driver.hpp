// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// An operation-stream driver for prefix_cache with an oracle written independently of the cache. It plays
// the engine: it "writes" KV blocks and snapshot slots (recording which token prefix each one holds) exactly
// when the cache's plans say the kernels would, and checks after every operation that
//   - no shared block or restored slot holds anything but the prompt's own prefix (no false hit),
//   - no block or slot is handed out while a live sequence holds it, or before the step that last touched
//     it completed (epoch deferral),
//   - failed calls change nothing observable,
//   - the hit rule holds (usable <= KV match <= L - 1, per policy) and check_invariants() passes;
//   - with cache_options::share_in_step, a block shared before its writer committed is one the writer will
//     write with the sharer's prefix, and a sharer's commit succeeds exactly when every such block was
//     written by its writer's first commit in the step it was admitted in;
//   - every restore comes from a slot written since it was last handed out, ready (its step completed),
//     not dropped as a sequence's surplus decode checkpoint, and of the exactness class it was written as;
//   - captures sit on the alignment grid, or on the block grid as a prefill split (`off_grid` placements,
//     whose split makes the rest of the prompt decode_continuation), and decode checkpoints sit at the
//     sequence's new length, a multiple of the interval;
//   - with policy::host_tier, the driver also keeps what every host unit holds, moving contents exactly as
//     the engine runs `take_transfers` (offloads, then onboards) after every call: a block onboarded, a
//     partial block copied from the host or a snapshot restored from it holds the prompt's own prefix, an
//     offloaded snapshot was a published one, and no host unit is overwritten while a sequence still holds
//     it or before the step that last read it completed;
//   - with policy::remote_tier, the driver keeps a store (content key -> header, contents): every block or
//     snapshot put is a prefill-exact one, each admit is preceded by a prefetch whose fetches it answers from
//     the store, sometimes as a miss, sometimes with a corrupted header and another prefix's contents (which
//     must never be used);
//   - under a policy that restores turn ends (`end_of_turn` accepting decode continuations, as `chat`), a
//     conversation continued turn by turn restores at least at its own last turn end whenever that snapshot
//     is still held (off a block boundary: captured in this cache, its step completed, neither its slot nor
//     its partial block handed out since, no TTL expiry) and the prompt continues its tokens; also after
//     another conversation repeated its opening and decoded the same reply (with `repeat_openings`, the
//     driver replays an ended conversation's prompt and reply);
//   - with cache_options::remote_turn_ends the store holds turn ends too, shared by two caches (shared_fleet),
//     and every write of a unit carries a stamp that copies keep (equal stamps, equal bytes): a turn end's
//     value (an item-2, class-1 header, its partial block and its snapshot) is gathered from GPU units whose
//     writing step completed and must be one prefix; the full blocks past the writer's prefill-exact lead are
//     continuation blocks (item-0, class-1 headers with an origin), values of their own, each computation put
//     once, and every block a turn end lists must be one of them holding its snapshot's prefix. Every
//     prefetch is probed; a turn end and its links (the continuation blocks the reader lacks) are answered,
//     in any order and some after later operations, as stored, as a miss or with a corrupted header; the
//     turn end is kept only once every part reported, never with a part missing or corrupted, and a restore
//     from it must use exactly its writer's bytes (the snapshot and the stamps of every block past the
//     writer's lead).
// The same driver serves the randomized model-based test, the libFuzzer target and its corpus replay.

#include <reprise/reprise.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace reprise::testing {

/// Reads the operation stream; yields zeros once exhausted.
class byte_source {
public:
  byte_source(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const noexcept { return pos_ >= size_; }
  std::uint32_t next() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint32_t below(std::uint32_t n) noexcept { return n == 0 ? 0 : next() % n; }

private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// What the driver exercised, beyond the cache's own metrics (the oracle's view).
struct driver_stats {
  std::uint64_t off_grid_captures_written = 0; ///< captures off the alignment grid the engine wrote
  std::uint64_t checkpoints_planned = 0;       ///< decode checkpoints `extend` planned
  std::uint64_t checkpoints_written = 0;       ///< decode checkpoints the engine wrote (listed in `written`)
  std::uint64_t checkpoints_published = 0;     ///< of those, published (known from the commit's captures_written)
  std::uint64_t checkpoints_dropped = 0;       ///< a sequence's oldest checkpoint dropped for a newer one
  std::uint64_t restores_off_grid = 0;         ///< restores of a snapshot written at an off-grid capture
  std::uint64_t restores_checkpoint = 0;       ///< restores of a decode checkpoint
  std::uint64_t restores_turn_end = 0;         ///< restores of a turn end
  std::uint64_t restores_from_host = 0;        ///< restores of a snapshot in the host tier
  std::uint64_t host_offloads = 0;             ///< KV blocks moved to the host tier
  std::uint64_t host_onboards = 0;             ///< KV blocks (full or partial) moved back
  std::uint64_t remote_puts = 0;               ///< values written to the store
  std::uint64_t remote_puts_through = 0;       ///< of them, blocks and snapshots written through from GPU memory
  std::uint64_t remote_hits = 0;               ///< fetched values the cache kept
  std::uint64_t remote_probed = 0;             ///< prefetches given what a probe found in the store
  std::uint64_t remote_rejected = 0;           ///< fetched values with a corrupted header, dropped
  std::uint64_t remote_turn_ends_put = 0;      ///< turn ends written to the store (`remote_turn_ends`)
  std::uint64_t remote_turn_end_hits = 0;      ///< fetched turn ends the cache kept
  std::uint64_t remote_turn_ends_corrupted = 0; ///< fetched turn ends given a corrupted header (all rejected)
  /// fetched turn ends rejected as stored: another prefill-exact lead than the reader's, tokens past or off
  /// the prompt's, blocks of another computation than those the reader holds
  std::uint64_t remote_turn_ends_refused = 0;
  std::uint64_t remote_links_put = 0;          ///< continuation blocks written to the store (turn ends' links)
  std::uint64_t remote_links_kept = 0;         ///< links fetched beside a turn end the cache kept
  std::uint64_t remote_turn_ends_link_lost = 0; ///< fetched turn ends with a link answered as a miss (all dropped)
  std::uint64_t restores_fetched_turn_end = 0; ///< restores of a fetched turn end, checked against its writer's bytes
  std::uint64_t repeated_openings = 0;         ///< prompts repeating an ended conversation's, decoding its reply again
  std::uint64_t own_turn_end_checks = 0;       ///< next turns whose own last turn end was still held (then restored)
  std::uint64_t own_turn_end_checks_repeated = 0; ///< of them, of a conversation whose opening another repeated

  driver_stats& operator+=(const driver_stats& o) noexcept {
    constexpr std::uint64_t driver_stats::*counts[] = {
        &driver_stats::off_grid_captures_written, &driver_stats::checkpoints_planned,
        &driver_stats::checkpoints_written, &driver_stats::checkpoints_published, &driver_stats::checkpoints_dropped,
        &driver_stats::restores_off_grid, &driver_stats::restores_checkpoint, &driver_stats::restores_turn_end,
        &driver_stats::restores_from_host, &driver_stats::host_offloads, &driver_stats::host_onboards,
        &driver_stats::remote_puts, &driver_stats::remote_puts_through, &driver_stats::remote_hits,
        &driver_stats::remote_probed, &driver_stats::remote_rejected, &driver_stats::remote_turn_ends_put,
        &driver_stats::remote_turn_end_hits, &driver_stats::remote_turn_ends_corrupted,
        &driver_stats::remote_turn_ends_refused, &driver_stats::remote_links_put, &driver_stats::remote_links_kept,
        &driver_stats::remote_turn_ends_link_lost, &driver_stats::restores_fetched_turn_end,
        &driver_stats::repeated_openings, &driver_stats::own_turn_end_checks,
        &driver_stats::own_turn_end_checks_repeated,
    };
    static_assert(sizeof(counts) / sizeof(counts[0]) * sizeof(std::uint64_t) == sizeof(driver_stats),
                  "every counter is summed");
    for (const auto count : counts) this->*count += o.*count;
    return *this;
  }
};

/// What the caches of one stream share: the remote store, the conversations that ended on any of them (a
/// next turn may go to another cache, as a fleet's router sends it) and the stamps that name the bytes of
/// each write. A unit's bytes are a function of the computation that wrote them, not of its tokens alone
/// (after a decode continuation): the driver gives each write a fresh stamp and every copy keeps it, so
/// units of equal stamps hold equal bytes.
struct shared_fleet {
  /// What one unit of a value holds: the tenant then the token prefix (empty: zeros), and its stamp.
  struct part {
    std::vector<token_id> contents;
    std::uint64_t stamp = 0;
  };
  struct value {
    std::vector<std::byte> header;
    part unit;            ///< a block's or a snapshot's unit; a turn end's snapshot
    std::vector<part> kv; ///< a turn end's KV part: its partial block (empty contents: zeros)
  };
  struct conversation {
    token_id tenant = 0;
    std::vector<token_id> tokens;
    std::uint32_t prompt = 0; ///< its last prompt's length: tokens past it were decoded
    /// Its media item (`cache_op_driver::oracle_seq::media_at`), which a next turn keeps.
    std::uint32_t media_at = std::numeric_limits<std::uint32_t>::max();
    std::uint32_t media_digest = 0;
    /// Its last turn's end, when one was captured: the driver of the cache that holds it, its position, the
    /// step that wrote it, its slot and partial block with their generations then, and that cache's count of
    /// TTL expiries then.
    const void* cache = nullptr;
    std::uint32_t turn_end = 0;
    std::int64_t written = -1;
    slot_id slot = no_slot;
    block_id tail = no_block;
    std::uint64_t slot_generation = 0, tail_generation = 0, expired = 0;
    bool repeated = false; ///< another conversation repeated its opening since
  };
  std::map<content_key, value> store;
  std::vector<conversation> history; ///< recently ended sequences, whose tokens later prompts may continue
  std::uint64_t stamps = 0;          ///< stamps drawn
  /// The block each origin (writer, serial) of a continuation block or a turn end's partial block named
  /// when it was put (its contents and stamp): one origin must never name two writes, or a reader would
  /// take another computation's block for its own.
  std::map<std::pair<std::uint64_t, std::uint64_t>, part> origins;
  /// The stamps of the continuation blocks put: each computation goes to the store once.
  std::set<std::uint64_t> links_put;
};

template <class Cache>
class cache_op_driver {
  using model = typename Cache::model_type;
  using policy_type = typename Cache::policy_type;
  static constexpr bool restores = policy::policy_traits<policy_type>::restores_snapshots;
  /// The policy's capture placements may sit off the alignment grid (on the block grid): `branch_block`.
  static constexpr bool off_grid = [] {
    if constexpr (restores) return policy::policy_traits<policy_type>::capture::off_grid;
    else return false;
  }();
  /// Conversations restore at their turn ends (`end_of_turn`, decode continuations accepted): `chat`.
  static constexpr bool restores_turn_ends = [] {
    if constexpr (restores)
      return policy::policy_traits<policy_type>::capture::at_turn_end &&
             policy::policy_traits<policy_type>::accepts_decode_continuation;
    else return false;
  }();
  /// `extend` may plan decode checkpoints (`decode_checkpoints`).
  static constexpr bool at_decode = [] {
    if constexpr (restores) return policy::policy_traits<policy_type>::capture::at_decode;
    else return false;
  }();
  using content = std::vector<token_id>; // tenant first, then the token prefix

  /// What wrote a slot's content last.
  enum class origin : std::uint8_t { none, prefill, off_grid, checkpoint, turn_end };

  struct pending_capture {
    capture_point point;
    bool checkpoint = false; // planned by `extend`
  };
  /// A decode checkpoint the cache published for a sequence, and the slot's hand-out count then: while it is
  /// unchanged the slot still holds that snapshot.
  struct published_checkpoint {
    slot_id slot;
    std::uint64_t generation;
  };

  struct oracle_seq {
    std::vector<token_id> tokens;
    token_id tenant = 0;
    // One media item at most: where its placeholders start (max: none) and which of `media_digests_`.
    std::uint32_t media_at = std::numeric_limits<std::uint32_t>::max();
    std::uint32_t media_digest = 0;
    std::uint32_t prompt = 0;    // the admitted prompt's length
    std::uint32_t computed = 0;
    std::uint32_t valid = 0;     // tokens whose KV the blocks hold (computed or shared)
    std::uint32_t own_from = 0;  // first block index this sequence writes
    std::vector<pending_capture> captures;
    slot_id restore = no_slot;
    // The sequence's published decode checkpoints, oldest first, as the cache keeps them (while `known`: a
    // commit whose published captures cannot be told apart from its refused ones makes it unknown).
    std::vector<published_checkpoint> checkpoints;
    bool checkpoints_known = true;
    // Positions from here on were computed from decoded tokens or decode_continuation state.
    std::uint32_t exact_until = std::numeric_limits<std::uint32_t>::max();
    // share_in_step: the blocks it shared while they were pending (not yet written) and the full prompt
    // blocks it computes, offered to later admissions of its step until its first commit.
    std::vector<block_id> shared_pending, own_pending;
    // policy::host_tier: the host snapshot restored and the host unit of a partial block copied, held until
    // the first commit.
    std::uint32_t host_restore = no_unit, host_copy = no_unit;
    // A repeated opening: the reply of the conversation whose prompt it repeats, which `extend` decodes again
    // (greedy decoding of the same prompt), from `prompt` on.
    std::vector<token_id> replay;
  };
  static constexpr std::uint32_t no_unit = std::numeric_limits<std::uint32_t>::max();
  static constexpr bool accepts_continuation = policy::policy_traits<policy_type>::accepts_decode_continuation;
  static constexpr bool host_tier = policy::tier_traits<typename Cache::tiers_type>::host;
  static constexpr bool remote_tier = policy::tier_traits<typename Cache::tiers_type>::remote;

public:
  std::string failure; // empty while every check passed
  std::uint64_t unwritten_refusals = 0; // sharer commits refused as the oracle predicted (share_in_step)
  driver_stats stats;

  /// Drives `cache`, typed or runtime-configured (the block size and alignment are read from it), created
  /// with `options` (share_in_step, the decode checkpoint interval and per-sequence bound, the TTL and
  /// remote_turn_ends are read from it), alone or in `fleet` with the other caches a stream drives.
  /// `repeat_openings` (under a policy that restores turn ends): a next turn is sometimes another conversation
  /// repeating the ended one's prompt and decoding its reply again (one more byte per next turn).
  explicit cache_op_driver(Cache cache, const cache_options& options = {}, std::shared_ptr<shared_fleet> fleet = {},
                           bool repeat_openings = false)
      : cache_(std::move(cache)), B(cache_.block_size()), A(cache_.alignment()),
        share_in_step_(options.share_in_step),
        repeat_openings_(restores_turn_ends && repeat_openings), turn_ends_(options.remote_turn_ends),
        interval_(at_decode ? options.decode_checkpoint_interval : 0),
        per_sequence_(options.decode_checkpoints_per_sequence),
        // A TTL can drop a checkpoint unseen: then the oracle does not model the per-sequence bound.
        model_checkpoint_bound_(options.snapshot_ttl_steps == 0),
        fleet_(fleet ? std::move(fleet) : std::make_shared<shared_fleet>()) {
    blocks_.resize(cache_.kv_blocks());
    block_stamp_.assign(cache_.kv_blocks(), 0);
    slot_stamp_.assign(cache_.snapshot_slots(), 0);
    host_block_stamp_.assign(cache_.host_kv_units(), 0);
    host_slot_stamp_.assign(cache_.host_snapshot_units(), 0);
    host_turn_end_.resize(cache_.host_snapshot_units());
    link_owner_.assign(cache_.host_kv_units(), no_unit);
    filling_kv_.assign(cache_.host_kv_units(), 0);
    filling_snapshot_.assign(cache_.host_snapshot_units(), 0);
    planned_.resize(cache_.kv_blocks());
    pending_.assign(cache_.kv_blocks(), 0);
    written_in_step_.assign(cache_.kv_blocks(), 0);
    block_continuation_.assign(cache_.kv_blocks(), 0);
    slot_continuation_.assign(cache_.snapshot_slots(), 0);
    block_touched_.assign(cache_.kv_blocks(), -1);
    block_written_.assign(cache_.kv_blocks(), -1);
    slots_.resize(cache_.snapshot_slots());
    slot_touched_.assign(cache_.snapshot_slots(), -1);
    slot_written_.assign(cache_.snapshot_slots(), -1);
    slot_published_.assign(cache_.snapshot_slots(), 0);
    slot_ready_.assign(cache_.snapshot_slots(), -1);
    slot_generation_.assign(cache_.snapshot_slots(), 0);
    block_generation_.assign(cache_.kv_blocks(), 0);
    slot_origin_.assign(cache_.snapshot_slots(), origin::none);
    host_blocks_.resize(cache_.host_kv_units());
    host_block_continuation_.assign(cache_.host_kv_units(), 0);
    host_block_read_.assign(cache_.host_kv_units(), -1);
    host_slots_.resize(cache_.host_snapshot_units());
    host_slot_continuation_.assign(cache_.host_snapshot_units(), 0);
    host_slot_valid_.assign(cache_.host_snapshot_units(), 0);
    host_slot_read_.assign(cache_.host_snapshot_units(), -1);
    for (int i = 0; i < 4; ++i) {
      std::vector<token_id> base(48 + 40 * static_cast<std::size_t>(i));
      for (std::size_t k = 0; k < base.size(); ++k) base[k] = static_cast<token_id>(k < 32 ? k : 1000 * i + k);
      bases_.push_back(base);
    }
  }

  const Cache& cache() const { return cache_; }

  /// Runs operations until the stream ends or a check fails. Returns false on failure.
  bool run(byte_source& in, std::size_t max_ops = 100000) {
    for (std::size_t op = 0; op < max_ops && !in.empty() && failure.empty(); ++op) step(in);
    return failure.empty();
  }

  void step(byte_source& in) {
    // With turn ends, fetches still in flight complete now, one time in three (before the operation).
    if (turn_ends_ && !deferred_.empty() && in.below(3) == 0) answer_deferred(in);
    if (!failure.empty()) return;
    switch (in.below(9)) {
    case 0: case 1: admit(in); break;
    case 2: case 3: commit(in); break;
    case 4: extend(in); break;
    case 5: end(in, in.below(2) == 0); break;
    case 6: fork(in); break;
    case 7:
      expect(cache_.step_complete(cache_.current_epoch()).has_value(), "step_complete");
      safe_before_ = cache_.current_epoch();
      std::fill(pending_.begin(), pending_.end(), 0); // the step's windows close
      break;
    case 8: bad_call(in); break;
    }
    if constexpr (host_tier) {
      // Write-through puts of steps that completed come with whichever `take_transfers` follows; nothing
      // else may.
      if (failure.empty()) {
        const transfer_plan t = cache_.take_transfers();
        const bool only_through = std::all_of(t.remote_puts.begin(), t.remote_puts.end(), [](const remote_put& p) { return p.device; });
        if (!t.kv_offload.empty() || !t.snapshot_offload.empty() || !t.kv_onboard.empty() || !only_through)
          fail("transfers planned by a call the driver did not expect to move anything");
        else run_puts(t.remote_puts);
      }
    }
    if (failure.empty() && !cache_.check_invariants().has_value()) fail("check_invariants");
    if (failure.empty()) check_live_contents();
  }

private:
  void fail(const std::string& what) {
    if (failure.empty()) failure = what + " (op state: epoch " + std::to_string(cache_.current_epoch()) + ")";
  }
  void expect(bool ok, const char* what) {
    if (!ok) fail(what);
  }
  std::uint64_t stamp() { return ++fleet_->stamps; }

  /// The oracle's view of token k of `s`: the token, or at its media item's position a value no token has,
  /// one per (digest, token), so that equal views mean equal tokens and equal media items (positional keys:
  /// a prefix before the item is the text prompt's, one past it holds the item at its position).
  static token_id view(const oracle_seq& s, std::size_t k) {
    const token_id t = s.tokens[k];
    return k == s.media_at ? static_cast<token_id>(-1 - static_cast<std::int64_t>(s.media_digest << 24) - t) : t;
  }
  content prefix(const oracle_seq& s, std::uint32_t n) const {
    content c{s.tenant};
    for (std::uint32_t k = 0; k < n; ++k) c.push_back(view(s, k));
    return c;
  }
  /// Whether `c` is exactly s's tenant followed by its first n tokens, its media item included (no
  /// allocation: this runs per block).
  static bool holds(const content& c, const oracle_seq& s, std::uint32_t n) {
    if (c.size() != std::size_t{n} + 1 || c[0] != s.tenant) return false;
    for (std::uint32_t k = 0; k < n; ++k)
      if (c[std::size_t{k} + 1] != view(s, k)) return false;
    return true;
  }
  /// The extra keys of `s`'s prompt; `item` holds its media item.
  extra_keys keys_of(const oracle_seq& s, media_item& item) const {
    extra_keys keys{.tenant_salt = static_cast<std::uint64_t>(s.tenant)};
    if (s.media_at < s.tokens.size()) {
      item = {.position = s.media_at, .digest = media_digests_[s.media_digest]};
      keys.media = std::span<const media_item>(&item, 1);
    }
    return keys;
  }
  bool held_by_live(block_id b) const {
    for (const auto& [id, s] : seqs_)
      if (std::find(cache_.block_table(id).begin(), cache_.block_table(id).end(), b) != cache_.block_table(id).end())
        return true;
    return false;
  }
  bool slot_held(slot_id slot) const {
    for (const auto& [id, s] : seqs_) {
      if (s.restore == slot) return true;
      for (const pending_capture& c : s.captures)
        if (c.point.slot == slot) return true;
    }
    return false;
  }
  bool slot_restoring(slot_id slot) const {
    for (const auto& [id, s] : seqs_)
      if (s.restore == slot) return true;
    return false;
  }
  /// The cache handed `slot` out for a capture: whatever it held is gone (evicted, or it was free).
  void hand_out(slot_id slot) {
    slot_published_[slot] = 0;
    ++slot_generation_[slot];
    slot_touched_[slot] = static_cast<std::int64_t>(cache_.current_epoch());
  }
  bool reusable(std::int64_t touched) const {
    return touched < 0 || static_cast<epoch_t>(touched) < safe_before_;
  }
  seq_id pick(byte_source& in) const {
    if (seqs_.empty()) return 999999;
    auto it = seqs_.begin();
    std::advance(it, in.below(static_cast<std::uint32_t>(seqs_.size())));
    return it->first;
  }

  struct observed {
    cache_metrics metrics;
    epoch_t epoch;
    std::vector<std::vector<block_id>> tables;
    bool operator==(const observed&) const = default;
  };
  observed observe() const {
    observed o{cache_.metrics(), cache_.current_epoch(), {}};
    for (const auto& [id, s] : seqs_) {
      auto t = cache_.block_table(id);
      o.tables.emplace_back(t.begin(), t.end());
    }
    return o;
  }

  /// Cuts `tokens` just past one of its last two multiples of the checkpoint interval (where a checkpoint
  /// may sit), keeping at least one token after it.
  void depart(byte_source& in, std::vector<token_id>& tokens) const {
    const auto size = static_cast<std::uint32_t>(tokens.size());
    std::uint32_t at = (size - 1) / interval_ * interval_; // the last multiple below the end
    if (at >= interval_ && in.below(2) == 0) at -= interval_;
    tokens.resize(at + 1 + in.below(size - at));
  }

  void admit(byte_source& in) {
    oracle_seq s;
    s.tenant = static_cast<token_id>(in.below(2));
    auto& history = fleet_->history;
    std::optional<shared_fleet::conversation> continued; // a next turn of this conversation
    bool repeat = false;
    if (!history.empty() && in.below(3) == 0) {
      // A next turn: an earlier sequence's prompt and decoded tokens, then a new message.
      shared_fleet::conversation& earlier = history[in.below(static_cast<std::uint32_t>(history.size()))];
      s.tenant = earlier.tenant;
      s.tokens = earlier.tokens;
      s.media_at = earlier.media_at;
      s.media_digest = earlier.media_digest;
      // Sometimes another conversation repeating its opening instead (a regeneration, a retry, an agent with
      // the same first message): its prompt again, decoding the same reply. (Without `repeat_openings` no
      // byte is read here.)
      repeat = repeat_openings_ && earlier.prompt < earlier.tokens.size() && in.below(3) == 0;
      if (repeat) {
        s.tokens.resize(earlier.prompt);
        s.replay.assign(earlier.tokens.begin() + earlier.prompt, earlier.tokens.end());
        earlier.repeated = true;
        ++stats.repeated_openings;
      } else if constexpr (restores_turn_ends) {
        continued = earlier;
      }
      // With decode checkpoints, sometimes a prompt that departs from the reply (an edited or regenerated
      // message): the previous turn's tokens only up to a point. (Other policies read no byte here, so
      // their streams, and the corpus, replay as before.)
      if (interval_ != 0 && !repeat && in.below(2) == 0) depart(in, s.tokens);
    } else if (interval_ != 0 && !seqs_.empty() && in.below(3) == 0) {
      // A prompt that departs from a live sequence's reply (a regenerated message, another branch of it),
      // where its decode checkpoints are still kept.
      const oracle_seq& live = seqs_.at(pick(in));
      s.tenant = live.tenant;
      s.tokens = live.tokens;
      s.media_at = live.media_at;
      s.media_digest = live.media_digest;
      depart(in, s.tokens);
    } else {
      const auto& base = bases_[in.below(static_cast<std::uint32_t>(bases_.size()))];
      const std::uint32_t keep = 1 + in.below(static_cast<std::uint32_t>(base.size()));
      s.tokens.assign(base.begin(), base.begin() + keep);
    }
    const std::uint32_t suffix = in.below(3) == 0 ? in.below(40) : 0;
    for (std::uint32_t k = 0; k < suffix; ++k) {
      const auto t = static_cast<token_id>(50000 + in.below(4));
      if (!repeat) s.tokens.push_back(t);
    }
    // Its own last turn end, still held: its slot and partial block not handed out since (a snapshot leaves
    // with its slot taken for another, or with its block; the partial block, a leaf, goes before any block
    // under it), no TTL expiry, and its step completed.
    const bool own_turn_end_held =
        continued && continued->cache == this && continued->tail != no_block &&
        continued->turn_end < s.tokens.size() && slot_generation_[continued->slot] == continued->slot_generation &&
        block_generation_[continued->tail] == continued->tail_generation &&
        cache_.metrics().snapshot_evictions_ttl == continued->expired && reusable(continued->written) &&
        std::equal(s.tokens.begin(), s.tokens.begin() + continued->turn_end, continued->tokens.begin());
    const seq_id id = next_id_++;
    // Media items, chosen without reading a byte (so that every corpus replays its operations as before):
    // a fresh prompt of one id in eight gets an image inside its third block, the same digest one token
    // later, another digest, or one at the very start, so that twins of equal tokens and other media meet
    // (and the rest still share as much as the coverage checks of the streams expect). Only on caches without
    // tiers below the GPU (the remote store model compares values with the prompt's plain tokens) and without
    // share_in_step: those streams keep the interleavings their coverage checks were tuned for, and
    // test_host_tier, test_remote_tier, test_remote_turn_ends and test_in_step_sharing cover media there.
    if constexpr (!host_tier && !remote_tier) {
      if (!share_in_step_ && !continued && s.media_at == std::numeric_limits<std::uint32_t>::max()) {
        constexpr std::uint32_t at[] = {40, 40, 41, 0};
        const auto pick = static_cast<std::uint32_t>(id % 32);
        if (pick < 4) {
          s.media_at = at[pick];
          s.media_digest = pick == 1 ? 1 : 0;
        }
      }
      if (s.media_at >= s.tokens.size()) s.media_at = std::numeric_limits<std::uint32_t>::max();
    }
    if constexpr (remote_tier) prefetch(in, s);
    const observed before = observe();
    media_item item;
    auto plan = cache_.admit(id, s.tokens, keys_of(s, item));
    if (!plan.has_value()) {
      expect(plan.error() == errc::pool_exhausted, "admit: unexpected error");
      expect(observe() == before, "admit: failed call changed the cache");
      return;
    }
    const auto L = static_cast<std::uint32_t>(s.tokens.size());
    expect(plan->block_table.size() == (L + B - 1) / B, "admit: table size");
    if (own_turn_end_held) {
      ++stats.own_turn_end_checks;
      stats.own_turn_end_checks_repeated += continued->repeated ? 1 : 0;
      expect(plan->usable_tokens >= continued->turn_end,
             "admit: a conversation's next turn did not restore at its own last turn end, which is still held");
    }
    if constexpr (remote_tier) check_unlisted(*plan);
    // policy::host_tier: a partial block onboarded from the host instead of copied on the GPU.
    const std::uint32_t host_copy = apply_transfers(plan->copy_src == no_block && plan->kv_matched_tokens % B != 0
                                                        ? plan->block_table[plan->shared_blocks]
                                                        : no_block);
    if (host_copy != no_unit) s.host_copy = host_copy;
    const bool copies = plan->copy_src != no_block || host_copy != no_unit; // a turn end's partial block, copied
    if (copies) {
      expect(plan->kv_matched_tokens > plan->shared_blocks * B && plan->kv_matched_tokens < (plan->shared_blocks + 1) * B,
             "admit: a copied partial block must extend the match by 1 .. B - 1 tokens");
      expect(plan->kv_matched_tokens == plan->usable_tokens, "admit: a copied partial block comes with its snapshot");
      if (host_copy == no_unit) {
        expect(plan->copy_dst == plan->block_table[plan->shared_blocks], "admit: copy into the first own block");
        expect(holds(blocks_[plan->copy_src], s, plan->kv_matched_tokens), "admit: FALSE HIT, copied block holds another prefix");
        expect(!held_by_live(plan->copy_src), "admit: copied block is a live sequence's block");
      } else {
        expect(holds(blocks_[plan->block_table[plan->shared_blocks]], s, plan->kv_matched_tokens),
               "admit: FALSE HIT, partial block onboarded from the host holds another prefix");
        if (host_block_continuation_[host_copy]) s.exact_until = std::min(s.exact_until, plan->shared_blocks * B);
      }
    } else {
      expect(plan->kv_matched_tokens == plan->shared_blocks * B, "admit: kv_matched != shared blocks");
    }
    expect(plan->kv_matched_tokens <= (copies ? L - 1 : (L - 1) / B * B), "admit: KV match beyond L - 1");
    expect(plan->usable_tokens <= plan->kv_matched_tokens, "admit: usable beyond KV match");
    if constexpr (std::is_same_v<policy_type, policy::block_sharing>)
      expect(plan->usable_tokens == plan->kv_matched_tokens, "admit: block_sharing must skip the KV match");
    if constexpr (std::is_same_v<policy_type, policy::memory_only>)
      expect(plan->usable_tokens == 0, "admit: memory_only skips nothing");
    for (std::uint32_t i = 0; i < plan->block_table.size(); ++i) {
      const block_id b = plan->block_table[i];
      // Handed out now: the blocks it computes, and those the host tier onboards (the last shared ones).
      if (i + plan->host_blocks_onboarded >= plan->shared_blocks) ++block_generation_[b];
      if (i < plan->shared_blocks && pending_[b]) {
        expect(share_in_step_, "admit: a pending block shared without share_in_step");
        expect(holds(planned_[b], s, (i + 1) * B), "admit: FALSE HIT, shared pending block will hold another prefix");
        s.shared_pending.push_back(b);
      } else if (i < plan->shared_blocks) {
        expect(s.shared_pending.empty(), "admit: a published block shared after a pending one");
        expect(holds(blocks_[b], s, (i + 1) * B), "admit: FALSE HIT, shared block holds another prefix");
        if (block_continuation_[b]) {
          expect(accepts_continuation, "admit: a decode-filled block reused under a prefill-exact policy");
          s.exact_until = std::min(s.exact_until, i * B);
        }
      } else {
        expect(!held_by_live(b), "admit: fresh block is held by a live sequence");
        expect(reusable(block_touched_[b]), "admit: fresh block reused before its step completed");
        if (share_in_step_ && (i + 1) * B <= L) { // offered to later admissions of the step
          pending_[b] = 1;
          written_in_step_[b] = 0;
          planned_[b] = prefix(s, (i + 1) * B);
          s.own_pending.push_back(b);
        }
      }
    }
    if constexpr (restores) {
      if (plan->usable_tokens != 0 && plan->restore_from_host) {
        expect(host_tier, "admit: a restore from the host without a host tier");
        const auto u = static_cast<std::uint32_t>(plan->restore_slot);
        expect(u < host_slots_.size(), "admit: host restore unit out of range");
        if (u < host_slots_.size()) {
          expect(holds(host_slots_[u], s, plan->usable_tokens), "admit: RESTORE from a host unit holding another prefix");
          expect(host_slot_valid_[u] != 0, "admit: RESTORE from a host unit no published snapshot was offloaded into");
          expect(!filling_snapshot_[u], "admit: RESTORE from a host unit a fetch still fills");
          if (host_slot_continuation_[u]) {
            expect(accepts_continuation, "admit: a decode_continuation snapshot restored under a prefill-exact policy");
            s.exact_until = std::min(s.exact_until, plan->usable_tokens);
          }
          if (plan->restore_exactness == exactness::prefill_exact)
            expect(plan->usable_tokens % A == 0, "admit: prefill-exact restore off the alignment grid");
          if (host_turn_end_[u].valid) check_fetched_turn_end(*plan, u, host_copy);
          s.host_restore = u;
          host_slot_read_[u] = static_cast<std::int64_t>(cache_.current_epoch());
          ++stats.restores_from_host;
        }
      } else if (plan->usable_tokens != 0) {
        expect(plan->restore_slot != no_slot, "admit: skip without restore slot");
        if (plan->restore_slot != no_slot) {
          expect(holds(slots_[plan->restore_slot], s, plan->usable_tokens),
                 "admit: RESTORE of a slot holding another prefix");
          expect(slot_published_[plan->restore_slot] != 0,
                 "admit: RESTORE of a slot not written since it was handed out, or dropped (a sequence's "
                 "surplus decode checkpoint)");
          expect(reusable(slot_ready_[plan->restore_slot]), "admit: RESTORE of a turn end before its step completed");
          switch (slot_origin_[plan->restore_slot]) {
          case origin::off_grid: ++stats.restores_off_grid; break;
          case origin::checkpoint: ++stats.restores_checkpoint; break;
          case origin::turn_end: ++stats.restores_turn_end; break;
          default: break;
          }
          if (slot_continuation_[plan->restore_slot]) {
            expect(accepts_continuation, "admit: a decode_continuation snapshot restored under a prefill-exact policy");
            s.exact_until = std::min(s.exact_until, plan->usable_tokens);
          }
          if constexpr (!policy::policy_traits<policy_type>::accepts_decode_continuation)
            expect(plan->restore_exactness == exactness::prefill_exact, "admit: decode snapshot not accepted");
          if (plan->restore_exactness == exactness::prefill_exact)
            expect(plan->usable_tokens % A == 0, "admit: prefill-exact restore off the alignment grid");
        }
      } else {
        expect(plan->restore_slot == no_slot && !plan->restore_from_host, "admit: restore slot without skip");
      }
      std::uint32_t last = plan->usable_tokens;
      for (const capture_point& c : plan->captures) {
        expect(c.position > last && c.position <= L, "admit: capture position outside (usable, L] or out of order");
        // Off the alignment grid only a placement that splits the prefill there (`branch_block`) may
        // capture, and only on the block grid.
        expect(c.position % A == 0 || (off_grid && c.position % B == 0), "admit: capture position off the grid");
        last = c.position;
        expect(!slot_held(c.slot) && reusable(slot_touched_[c.slot]), "admit: capture slot still in use");
        for (const capture_point& d : plan->captures)
          expect(&c == &d || c.slot != d.slot, "admit: capture slots not distinct");
      }
      if constexpr (std::is_same_v<policy_type, policy::chat>) {
        // chat's only placement `admit` serves is branch_block: the end of the last shared KV block.
        expect(plan->captures.size() <= 1, "admit: chat plans at most the branch_block capture");
        for (const capture_point& c : plan->captures)
          expect(c.position == plan->kv_matched_tokens && !copies, "admit: chat's capture is not at the shared blocks' end");
      }
      // The engine ends a prefill piece at an off-grid capture: what it computes after the first one
      // continues that split session rather than equal a cold prefill.
      for (const capture_point& c : plan->captures)
        if (c.position % A != 0) {
          s.exact_until = std::min(s.exact_until, static_cast<std::uint32_t>(c.position));
          break;
        }
      for (const capture_point& c : plan->captures) {
        s.captures.push_back({c, false});
        hand_out(c.slot);
      }
      s.restore = plan->restore_from_host ? no_slot : plan->restore_slot;
      if (s.restore != no_slot) slot_touched_[s.restore] = static_cast<std::int64_t>(cache_.current_epoch());
    }
    if (copies && host_copy == no_unit) { // the engine's copy kernel, before the prefill
      blocks_[plan->copy_dst] = blocks_[plan->copy_src];
      block_stamp_[plan->copy_dst] = block_stamp_[plan->copy_src];
      block_written_[plan->copy_dst] = static_cast<std::int64_t>(cache_.current_epoch());
      block_continuation_[plan->copy_dst] = block_continuation_[plan->copy_src];
      if (block_continuation_[plan->copy_src]) s.exact_until = std::min(s.exact_until, plan->shared_blocks * B);
      block_touched_[plan->copy_src] = static_cast<std::int64_t>(cache_.current_epoch());
    }
    // The prompt's outputs continue a session as soon as anything decode_continuation feeds them: a restored
    // snapshot, a copied or shared decode-filled block (even past the restore: its KV is not recomputed), or
    // a prefill split at an off-grid capture.
    expect((plan->restore_exactness == exactness::decode_continuation) == (s.exact_until < L),
           "admit: restore_exactness disagrees with what was reused");
    s.computed = plan->usable_tokens;
    // Blocks shared while pending hold nothing yet.
    s.valid = plan->kv_matched_tokens - static_cast<std::uint32_t>(s.shared_pending.size()) * B;
    s.own_from = plan->shared_blocks;
    s.prompt = static_cast<std::uint32_t>(s.tokens.size());
    seqs_[id] = std::move(s);
  }

  void commit(byte_source& in) {
    if (seqs_.empty()) return;
    const seq_id id = pick(in);
    oracle_seq& s = seqs_[id];
    const auto L = static_cast<std::uint32_t>(s.tokens.size());
    std::uint32_t n = s.computed + in.below(L - s.computed + 1);
    // With decode checkpoints, often the whole sequence, as a decode step commits. (Other policies read no
    // byte here.)
    if (interval_ != 0 && in.below(2) == 0) n = L;
    commit_to(in, id, n);
  }

  /// Commits sequence `id` up to `n` (>= its computed tokens), writing a random subset of the due captures.
  void commit_to(byte_source& in, seq_id id, std::uint32_t n) {
    oracle_seq& s = seqs_[id];
    // Prefill captures and decode checkpoints alike: the engine writes some, not others.
    std::vector<std::uint32_t> written;
    for (const pending_capture& c : s.captures)
      if (c.point.position <= n && in.below(4) != 0) written.push_back(static_cast<std::uint32_t>(c.point.position));
    // The engine computed [computed, n): it writes KV of its own blocks and the captured states.
    const auto table = std::vector<block_id>(cache_.block_table(id).begin(), cache_.block_table(id).end());
    // A sharer commits once what it shares is written by its writer's first commit within the step.
    const bool unwritten = std::any_of(s.shared_pending.begin(), s.shared_pending.end(),
                                       [&](block_id b) { return !written_in_step_[b]; });
    const observed before = observe();
    const std::uint64_t published_before = cache_.metrics().captures_written;
    auto r = cache_.commit(id, n, written);
    if (unwritten) {
      expect(!r.has_value() && r.error() == errc::unwritten_blocks, "commit: a sharer committed an unwritten block");
      expect(observe() == before, "commit: failed call changed the cache");
      unwritten_refusals += !r.has_value();
      return;
    }
    expect(r.has_value(), "commit: valid commit failed");
    if (!r.has_value()) return;
    s.shared_pending.clear();
    for (std::size_t k = 0; k < s.own_pending.size(); ++k) { // the window closes with what n covers written
      const block_id b = s.own_pending[k];
      if (pending_[b] && (s.own_from + k + 1) * B <= n) written_in_step_[b] = 1;
      pending_[b] = 0;
    }
    s.own_pending.clear();
    for (std::uint32_t i = s.own_from; i < table.size() && i * B < n; ++i) {
      if ((i + 1) * B > s.computed) block_stamp_[table[i]] = stamp(); // written now: [computed, n) meets it
      blocks_[table[i]] = prefix(s, std::min(n, (i + 1) * B));
      block_written_[table[i]] = static_cast<std::int64_t>(cache_.current_epoch());
      block_continuation_[table[i]] = std::min(n, (i + 1) * B) > s.exact_until;
    }
    // The cache publishes a written capture unless its block already holds a snapshot as good; the oracle
    // tells which from the count published: all, none, or (some of several refused) unknown.
    const std::uint64_t published = cache_.metrics().captures_written - published_before;
    expect(published <= written.size(), "commit: more captures published than written");
    const bool all = published == written.size(), none = published == 0;
    if (!all && !none) s.checkpoints_known = false;
    // In position order, as the cache resolves them (a checkpoint publishes after every earlier capture).
    for (const pending_capture& pc : s.captures) {
      const capture_point& c = pc.point;
      if (c.position > n) continue;
      const auto p = static_cast<std::uint32_t>(c.position);
      slot_touched_[c.slot] = static_cast<std::int64_t>(cache_.current_epoch());
      if (std::find(written.begin(), written.end(), p) == written.end()) {
        slot_published_[c.slot] = 0; // freed
        continue;
      }
      slots_[c.slot] = prefix(s, p);
      slot_stamp_[c.slot] = stamp();
      slot_written_[c.slot] = static_cast<std::int64_t>(cache_.current_epoch());
      // Off the alignment grid the prefill was split there; a checkpoint holds decoded tokens.
      slot_continuation_[c.slot] = pc.checkpoint || p % A != 0 || p > s.exact_until;
      slot_origin_[c.slot] = pc.checkpoint ? origin::checkpoint : p % A != 0 ? origin::off_grid : origin::prefill;
      slot_ready_[c.slot] = -1; // written by the steps this commit reports
      slot_published_[c.slot] = none ? 0 : 1;
      if (!pc.checkpoint) {
        stats.off_grid_captures_written += p % A != 0;
        continue;
      }
      ++stats.checkpoints_written;
      if (!all) continue;
      ++stats.checkpoints_published;
      // The sequence keeps its newest `decode_checkpoints_per_sequence`: publishing one more drops the
      // oldest, unless it is no longer that snapshot (evicted, its slot handed out since) or a sequence is
      // restoring it now.
      if (!model_checkpoint_bound_ || !s.checkpoints_known) continue;
      s.checkpoints.push_back({c.slot, slot_generation_[c.slot]});
      if (s.checkpoints.size() <= per_sequence_) continue;
      const published_checkpoint oldest = s.checkpoints.front();
      s.checkpoints.erase(s.checkpoints.begin());
      if (slot_generation_[oldest.slot] == oldest.generation && !slot_restoring(oldest.slot)) {
        slot_published_[oldest.slot] = 0;
        ++stats.checkpoints_dropped;
      }
    }
    std::erase_if(s.captures, [&](const pending_capture& c) { return c.point.position <= n; });
    if (s.restore != no_slot) {
      slot_touched_[s.restore] = static_cast<std::int64_t>(cache_.current_epoch());
      s.restore = no_slot;
    }
    release_host_holds(s);
    s.computed = n;
    s.valid = std::max(s.valid, n);
  }

  void extend(byte_source& in) {
    if (seqs_.empty()) return;
    const seq_id id = pick(in);
    oracle_seq& s = seqs_[id];
    std::vector<token_id> more;
    if (interval_ != 0 && in.below(2) == 0) {
      // With decode checkpoints, often decode exactly up to the next multiple of the interval; one byte
      // picks the tokens (one of three patterns). Other policies read no byte here.
      const std::uint32_t pattern = in.below(3);
      more.resize(interval_ - s.tokens.size() % interval_);
      for (std::size_t k = 0; k < more.size(); ++k) more[k] = static_cast<token_id>(60000 + (pattern + k) % 3);
    } else {
      more.resize(1 + in.below(20));
      for (auto& t : more) t = static_cast<token_id>(60000 + in.below(3));
    }
    for (std::size_t k = 0; k < more.size(); ++k) { // a repeated opening decodes the reply it repeats
      const std::size_t at = s.tokens.size() + k - s.prompt;
      if (at < s.replay.size()) more[k] = s.replay[at];
    }
    const observed before = observe();
    auto plan = cache_.extend(id, more);
    if (!plan.has_value()) {
      expect(plan.error() == errc::pool_exhausted, "extend: unexpected error");
      expect(observe() == before, "extend: failed call changed the cache");
      return;
    }
    apply_transfers();
    for (block_id b : plan->new_blocks) {
      ++block_generation_[b];
      expect(reusable(block_touched_[b]), "extend: block reused before its step completed");
      expect(std::count(cache_.block_table(id).begin(), cache_.block_table(id).end(), b) == 1 &&
                 [&] {
                   for (const auto& [other, o] : seqs_)
                     if (other != id && std::find(cache_.block_table(other).begin(), cache_.block_table(other).end(),
                                                  b) != cache_.block_table(other).end())
                       return false;
                   return true;
                 }(),
             "extend: new block held elsewhere");
    }
    // Decoded tokens of a model with recurrent layers: their KV continues this session only.
    if (cache_.geometry().has_recurrent)
      s.exact_until = std::min(s.exact_until, static_cast<std::uint32_t>(s.tokens.size()));
    s.tokens.insert(s.tokens.end(), more.begin(), more.end());
    const auto length = static_cast<std::uint32_t>(s.tokens.size());
    // A decode checkpoint: at most one, at the new length, a multiple of the interval, past what is
    // computed, in a slot no sequence holds and no unfinished step touched.
    expect(plan->captures.size() <= (interval_ != 0 ? 1u : 0u), "extend: a capture without decode checkpoints, or several");
    for (const capture_point& c : plan->captures) {
      expect(c.position == length && length % interval_ == 0 && c.position > s.computed,
             "extend: decode checkpoint position");
      expect(std::none_of(s.captures.begin(), s.captures.end(),
                          [&](const pending_capture& p) { return p.point.position == c.position; }),
             "extend: a checkpoint planned twice at one position");
      expect(!slot_held(c.slot) && reusable(slot_touched_[c.slot]), "extend: checkpoint slot still in use");
      s.captures.push_back({c, true});
      hand_out(c.slot);
      ++stats.checkpoints_planned;
    }
    // An engine may extend by nothing (a step that sampled no token for the sequence): that reaches no new
    // position, so it plans nothing and changes nothing (it once planned the checkpoint above again, once
    // per call, into fresh slots). Reads no byte: the streams replay as before.
    const observed extended = observe();
    auto empty = cache_.extend(id, std::span<const token_id>{});
    expect(empty.has_value() && empty->captures.empty() && empty->new_blocks.empty(),
           "extend: an empty extend planned a capture or took a block");
    expect(observe() == extended, "extend: an empty extend changed the cache");
  }

  void end(byte_source& in, bool finish) {
    if (seqs_.empty()) return;
    const seq_id id = pick(in);
    oracle_seq& s = seqs_[id];
    const auto table = std::vector<block_id>(cache_.block_table(id).begin(), cache_.block_table(id).end());
    const epoch_t now = cache_.current_epoch();
    // A turn-end capture copies the live state, which must be at the committed position: the prompt committed
    // whole, and at most the last sampled token extended but not fed.
    constexpr bool captures_turn_end = [] {
      if constexpr (restores) return policy::policy_traits<policy_type>::capture::at_turn_end;
      else return false;
    }();
    auto off_committed = [&] { return s.computed < s.prompt || s.tokens.size() - s.computed > 1; };
    // Usually the engine commits what it fed before ending the turn (all but the last sampled token).
    if (finish && captures_turn_end && off_committed() && in.below(2) == 0) {
      commit_to(in, id, std::max<std::uint32_t>(s.prompt, static_cast<std::uint32_t>(s.tokens.size()) - 1));
      if (!failure.empty() || seqs_.count(id) == 0) return;
    }
    if (finish && captures_turn_end && off_committed()) {
      const observed before = observe();
      auto refused = cache_.finish(id);
      expect(!refused.has_value() && refused.error() == errc::invalid_argument,
             "finish: a live state off the committed position must be refused");
      expect(observe() == before, "finish: refused but changed the cache");
      finish = false; // the engine releases it instead
    }
    shared_fleet::conversation ended{s.tenant, s.tokens, s.prompt};
    ended.media_at = s.media_at;
    ended.media_digest = s.media_digest;
    if (finish) {
      auto plan = cache_.finish(id);
      expect(plan.has_value(), "finish failed");
      apply_transfers();
      if (plan.has_value() && plan->capture.slot != no_slot) {
        expect(plan->capture.position == s.computed, "finish: capture position");
        // Before taking its slot the cache demotes the turn end this sequence restored from and its decode
        // checkpoints (LRU order, not modelled): whichever slot it takes must be idle since a completed step.
        expect(reusable(slot_touched_[plan->capture.slot]) && !slot_held(plan->capture.slot),
               "finish: slot still in use");
        const slot_id slot = plan->capture.slot;
        hand_out(slot);
        slots_[slot] = prefix(s, plan->capture.position); // the engine copies its live state
        slot_stamp_[slot] = stamp();
        slot_written_[slot] = static_cast<std::int64_t>(cache_.current_epoch());
        slot_continuation_[slot] = 1;
        slot_origin_[slot] = origin::turn_end;
        slot_published_[slot] = 1;
        slot_ready_[slot] = static_cast<std::int64_t>(now); // written in this step: restorable once it completes
        if (plan->capture.position % B != 0) {
          ended.cache = this;
          ended.turn_end = plan->capture.position;
          ended.written = static_cast<std::int64_t>(now);
          ended.slot = slot;
          ended.slot_generation = slot_generation_[slot];
          ended.tail = table[plan->capture.position / B];
          ended.tail_generation = block_generation_[ended.tail];
          ended.expired = cache_.metrics().snapshot_evictions_ttl;
        }
      }
    } else {
      expect(cache_.release(id).has_value(), "release failed");
    }
    for (const pending_capture& c : s.captures) { // freed
      slot_touched_[c.point.slot] = static_cast<std::int64_t>(now);
      slot_published_[c.point.slot] = 0;
    }
    if (s.restore != no_slot) slot_touched_[s.restore] = static_cast<std::int64_t>(now);
    release_host_holds(s);
    for (block_id b : s.own_pending) pending_[b] = 0; // its window closes with nothing written
    s.own_pending.clear();
    if (s.tokens.size() < 400) {
      auto& history = fleet_->history;
      history.push_back(std::move(ended));
      if (history.size() > 8) history.erase(history.begin());
    }
    seqs_.erase(id);
    for (block_id b : table) block_touched_[b] = static_cast<std::int64_t>(now);
    expect(cache_.release(id).error() == errc::double_release, "second release must be double_release");
  }

  void fork(byte_source& in) {
    if (seqs_.empty()) return;
    const seq_id src = pick(in);
    const seq_id dst = next_id_++;
    const observed before = observe();
    auto plan = cache_.fork(src, dst);
    oracle_seq& s = seqs_[src];
    if (!plan.has_value()) {
      expect(plan.error() == (s.computed != s.tokens.size() ? errc::invalid_argument : errc::pool_exhausted),
             "fork: unexpected error");
      expect(observe() == before, "fork: failed call changed the cache");
      return;
    }
    apply_transfers();
    oracle_seq d = s;
    d.captures.clear();
    d.restore = no_slot;
    d.host_restore = d.host_copy = no_unit;
    d.shared_pending.clear(); // a fork source has committed: nothing it shares is pending, its window closed
    d.own_pending.clear();
    d.checkpoints.clear(); // the fork publishes its own
    d.checkpoints_known = true;
    d.own_from = static_cast<std::uint32_t>(s.tokens.size() / B);
    if (plan->copy_dst != no_block) {
      ++block_generation_[plan->copy_dst];
      expect(reusable(block_touched_[plan->copy_dst]), "fork: copy block reused before its step completed");
      blocks_[plan->copy_dst] = blocks_[plan->copy_src]; // the engine's copy kernel
      block_stamp_[plan->copy_dst] = block_stamp_[plan->copy_src];
      block_written_[plan->copy_dst] = static_cast<std::int64_t>(cache_.current_epoch());
      block_continuation_[plan->copy_dst] = block_continuation_[plan->copy_src];
    }
    seqs_[dst] = d;
  }

  void bad_call(byte_source& in) {
    const observed before = observe();
    const seq_id unknown = next_id_ + 1000;
    switch (in.below(4)) {
    case 0: expect(cache_.commit(unknown, 0).error() == errc::unknown_sequence, "bad commit"); break;
    case 1:
      if (!seqs_.empty()) {
        const seq_id id = pick(in);
        expect(cache_.commit(id, static_cast<std::uint32_t>(seqs_[id].tokens.size()) + 1).error() == errc::out_of_range,
               "commit beyond tokens");
      }
      break;
    case 2:
      if (!seqs_.empty()) expect(cache_.admit(pick(in), bases_[0]).error() == errc::duplicate_sequence, "dup admit");
      break;
    case 3: expect(cache_.extend(unknown, bases_[0]).error() == errc::unknown_sequence, "bad extend"); break;
    }
    expect(observe() == before, "bad call changed the cache");
  }

  /// policy::remote_tier: writes each put's unit (a host unit, or with write-through a GPU unit whose
  /// writing step completed) into the store, checking that it holds a prefill-exact value; a turn end's
  /// payload is gathered from GPU memory (`put_turn_end`).
  void run_puts(std::span<const remote_put> puts) {
    for (const remote_put& p : puts) {
      if (p.item == remote_item::turn_end) {
        put_turn_end(p);
        if (!failure.empty()) return;
        continue;
      }
      expect(p.item == remote_item::block || p.item == remote_item::snapshot, "put: an item of no kind");
      expect(p.kv_units.empty(), "put: a block or snapshot put lists KV units");
      if (p.item == remote_item::block && p.header.size() > 9 && p.header[9] == std::byte{1}) {
        put_continuation_block(p);
        if (!failure.empty()) return;
        continue;
      }
      const bool block = p.item == remote_item::block;
      if (p.device) { // write-through, from GPU memory: written in a step that completed
        expect(p.unit < (block ? blocks_.size() : slots_.size()), "put: GPU unit out of range");
        if (!failure.empty()) return;
        if (block) {
          expect(reusable(block_written_[p.unit]), "put: a GPU block whose writing step has not completed");
          expect(blocks_[p.unit].size() > 1 && (blocks_[p.unit].size() - 1) % B == 0 && !block_continuation_[p.unit],
                 "put: a GPU block that is not a prefill-exact full block");
          fleet_->store[p.key] = {{p.header.begin(), p.header.end()}, {blocks_[p.unit], block_stamp_[p.unit]}, {}};
        } else {
          expect(slot_published_[p.unit] != 0 && reusable(slot_written_[p.unit]),
                 "put: a GPU slot that holds no published snapshot whose step completed");
          expect(!slot_continuation_[p.unit] && (slots_[p.unit].size() - 1) % A == 0,
                 "put: a GPU snapshot that is not a prefill-exact one on the grid");
          fleet_->store[p.key] = {{p.header.begin(), p.header.end()}, {slots_[p.unit], slot_stamp_[p.unit]}, {}};
        }
        ++stats.remote_puts;
        ++stats.remote_puts_through;
        continue;
      }
      expect(p.unit < (block ? host_blocks_.size() : host_slots_.size()), "put: unit out of range");
      if (!failure.empty()) return;
      if (block) {
        expect(host_blocks_[p.unit].size() > 1 && (host_blocks_[p.unit].size() - 1) % B == 0 &&
                   !host_block_continuation_[p.unit],
               "put: a host block that is not a prefill-exact full block");
        fleet_->store[p.key] = {{p.header.begin(), p.header.end()}, {host_blocks_[p.unit], host_block_stamp_[p.unit]}, {}};
      } else {
        expect(host_slot_valid_[p.unit] && !host_slot_continuation_[p.unit] && (host_slots_[p.unit].size() - 1) % A == 0,
               "put: a host snapshot that is not a prefill-exact one on the grid");
        fleet_->store[p.key] = {{p.header.begin(), p.header.end()}, {host_slots_[p.unit], host_slot_stamp_[p.unit]}, {}};
      }
      ++stats.remote_puts;
    }
  }

  /// The remote header's layout (docs/tiers.md): magic [8] | item u8 | class u8 | 0 u16 | position u32 |
  /// tokens u32 | key [32] | parent [32] | tokens i32..., little-endian; a turn end's then has 16 bytes of
  /// origin per KV part.
  static constexpr std::size_t header_fixed = 84, origin_bytes = 16;
  static std::uint32_t header_u32(std::span<const std::byte> h, std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(h[at + i]) << (8 * i);
    return v;
  }
  static std::uint64_t header_u64(std::span<const std::byte> h, std::size_t at) {
    return header_u32(h, at) | std::uint64_t{header_u32(h, at + 4)} << 32;
  }

  /// `remote_turn_ends`: a turn end's continuation block `p` (item 0, class 1), put from GPU memory into the
  /// store: a full decode-filled block whose writing step completed, at its header's position, its header's
  /// tokens its own, then an origin that names no other computation; never a computation put before (a turn
  /// end puts only the blocks the store lacks).
  void put_continuation_block(const remote_put& p) {
    expect(p.device, "put: a continuation block from a host unit (they are put from GPU memory)");
    expect(p.unit < blocks_.size(), "put: continuation block out of range");
    expect(p.header.size() == header_fixed + 4 * std::size_t{B} + origin_bytes && header_u32(p.header, 16) == B,
           "put: a continuation block's header is not a block header of B tokens and an origin");
    if (!failure.empty()) return;
    const content& c = blocks_[p.unit];
    const std::uint32_t position = header_u32(p.header, 12);
    expect(reusable(block_written_[p.unit]), "put: a continuation block whose writing step has not completed");
    expect(block_continuation_[p.unit] && position >= B && position % B == 0 && c.size() == std::size_t{position} + 1,
           "put: a continuation block that is not a full decode-filled block at its header's position");
    for (std::uint32_t k = 0; k < B && failure.empty(); ++k)
      expect(static_cast<token_id>(header_u32(p.header, header_fixed + 4 * std::size_t{k})) ==
                 c[1 + std::size_t{position} - B + k],
             "put: a continuation block's header tokens are not its own");
    if (!failure.empty()) return;
    const std::size_t at = header_fixed + 4 * std::size_t{B};
    const std::pair origin{header_u64(p.header, at), header_u64(p.header, at + 8)};
    expect(origin.first != 0, "put: a continuation block without an origin");
    const auto [named, fresh] = fleet_->origins.emplace(origin, shared_fleet::part{c, block_stamp_[p.unit]});
    expect(fresh || named->second.stamp == block_stamp_[p.unit], "put: one origin names blocks of two computations");
    expect(fleet_->links_put.insert(block_stamp_[p.unit]).second,
           "put: a continuation block put twice (a turn end puts only the blocks the store lacks)");
    if (!failure.empty()) return;
    fleet_->store[p.key] = {{p.header.begin(), p.header.end()}, {c, block_stamp_[p.unit]}, {}};
    ++stats.remote_puts;
    ++stats.remote_links_put;
  }

  /// `remote_turn_ends`: gathers turn end `p`'s payload from GPU memory as the engine does (its one KV part
  /// `kv_units`, the partial block or zeros for `no_unit`, then slot `unit`) into the store, checking that
  /// every unit was written in a step that completed, that the slot holds a published decode-continuation
  /// snapshot at the position the header (item 2, class 1) names, that the header's tokens and the partial
  /// block hold the prefix of that snapshot's tokens, and that each full block d .. floor(p/B) - 1 the header
  /// lists is a continuation block put before it (by this turn end or an earlier one) holding that prefix.
  void put_turn_end(const remote_put& p) {
    expect(p.device, "put: a turn end from a host unit (turn ends are put from GPU memory)");
    expect(p.header.size() >= header_fixed && p.header[8] == std::byte{2} && p.header[9] == std::byte{1},
           "put: a turn end's header is not item 2, class 1");
    expect(p.unit < slots_.size(), "put: turn end slot out of range");
    if (!failure.empty()) return;
    const std::uint32_t position = header_u32(p.header, 12), tokens = header_u32(p.header, 16);
    const content& snapshot = slots_[p.unit];
    expect(slot_published_[p.unit] != 0 && slot_continuation_[p.unit] != 0 && reusable(slot_written_[p.unit]),
           "put: a turn end's slot holds no published decode-continuation snapshot whose step completed");
    expect(snapshot.size() == std::size_t{position} + 1, "put: a turn end's snapshot is not at its header's position");
    expect(position != 0 && tokens <= position && (position - tokens) % B == 0,
           "put: a turn end's tokens do not start on a block boundary");
    if (!failure.empty()) return;
    const std::uint32_t first = (position - tokens) / B, parts = position / B - first + 1;
    expect(p.kv_units.size() == 1 &&
               p.header.size() == header_fixed + 4 * std::size_t{tokens} + origin_bytes * std::size_t{parts},
           "put: a turn end's payload is not its partial block, or its origins disagree with its header");
    for (std::uint32_t k = 0; k < tokens && failure.empty(); ++k)
      expect(static_cast<token_id>(header_u32(p.header, header_fixed + 4 * std::size_t{k})) ==
                 snapshot[1 + std::size_t{first} * B + k],
             "put: a turn end's header tokens are not its snapshot's");
    if (!failure.empty()) return;
    auto origin_of = [&](std::uint32_t j) {
      const std::size_t at = header_fixed + 4 * std::size_t{tokens} + origin_bytes * j;
      return std::pair{header_u64(p.header, at), header_u64(p.header, at + 8)};
    };
    for (std::uint32_t j = 0; j + 1 < parts && failure.empty(); ++j) { // its links
      const auto origin = origin_of(j);
      const auto it = fleet_->origins.find(origin);
      const std::size_t holds_tokens = std::size_t{first + j + 1} * B;
      expect(origin.first != 0 && it != fleet_->origins.end() && it->second.contents.size() == holds_tokens + 1 &&
                 std::equal(it->second.contents.begin(), it->second.contents.end(), snapshot.begin()),
             "put: a turn end lists a block that no continuation block put holds with its snapshot's prefix");
    }
    if (!failure.empty()) return;
    shared_fleet::value v{{p.header.begin(), p.header.end()}, {snapshot, slot_stamp_[p.unit]}, {}};
    const std::uint32_t u = p.kv_units[0];
    if (u == no_unit) {
      expect(position % B == 0, "put: a turn end without its partial block (no_unit stands for none)");
      v.kv.push_back({}); // zeros
    } else {
      expect(position % B != 0, "put: a turn end at a block boundary with a partial block");
      expect(u < blocks_.size(), "put: turn end block out of range");
      if (!failure.empty()) return;
      expect(reusable(block_written_[u]), "put: a turn end's GPU block whose writing step has not completed");
      expect(blocks_[u].size() == std::size_t{position} + 1 && std::equal(blocks_[u].begin(), blocks_[u].end(), snapshot.begin()),
             "put: a turn end's partial block holds another prefix than its snapshot");
      const auto origin = origin_of(parts - 1);
      expect(origin.first != 0, "put: a turn end's partial block without an origin");
      const auto [named, fresh] = fleet_->origins.emplace(origin, shared_fleet::part{blocks_[u], block_stamp_[u]});
      expect(fresh || named->second.stamp == block_stamp_[u], "put: one origin names blocks of two computations");
      if (!failure.empty()) return;
      v.kv.push_back({blocks_[u], block_stamp_[u]});
    }
    fleet_->store[p.key] = std::move(v);
    ++stats.remote_puts;
    ++stats.remote_turn_ends_put;
  }

  /// policy::host_tier: runs the transfers the last call planned as the engine does, offloads first, checking
  /// each. `tail_dst`: the block a partial block may be onboarded into by this admit; returns the host unit
  /// it came from (`no_unit` if none). Without a host tier, checks that nothing is planned.
  std::uint32_t apply_transfers(block_id tail_dst = no_block) {
    const transfer_plan t = cache_.take_transfers();
    if constexpr (!host_tier) {
      expect(t.empty(), "transfers without a host tier");
      return no_unit;
    }
    const auto now = static_cast<std::int64_t>(cache_.current_epoch());
    run_puts(t.remote_puts); // first: the offloads below may overwrite the units
    if (!failure.empty()) return no_unit;
    auto host_held = [&](std::uint32_t u, bool snapshot) {
      for (const auto& [id, q] : seqs_)
        if ((snapshot ? q.host_restore : q.host_copy) == u) return true;
      return false;
    };
    for (const unit_move& m : t.kv_offload) {
      expect(m.src < blocks_.size() && m.dst < host_blocks_.size(), "offload: unit out of range");
      if (!failure.empty()) return no_unit;
      expect(!host_held(m.dst, false), "offload: OVERWRITES a host unit a sequence still holds");
      expect(!filling_kv_[m.dst], "offload: OVERWRITES a host unit a fetch still fills");
      expect(reusable(host_block_read_[m.dst]), "offload: OVERWRITES a host unit before the step that read it completed");
      expect(blocks_[m.src].size() > 1, "offload: a block that holds nothing");
      host_blocks_[m.dst] = blocks_[m.src];
      host_block_stamp_[m.dst] = block_stamp_[m.src];
      host_block_continuation_[m.dst] = block_continuation_[m.src];
      ++stats.host_offloads;
    }
    for (const unit_move& m : t.snapshot_offload) {
      expect(m.src < slots_.size() && m.dst < host_slots_.size(), "offload: snapshot unit out of range");
      if (!failure.empty()) return no_unit;
      expect(slot_published_[m.src] != 0 && reusable(slot_ready_[m.src]),
             "offload: a slot that holds no published, restorable snapshot");
      expect(!host_held(m.dst, true), "offload: OVERWRITES a host snapshot a sequence still holds");
      expect(!filling_snapshot_[m.dst], "offload: OVERWRITES a host snapshot unit a fetch still fills");
      expect(reusable(host_slot_read_[m.dst]), "offload: OVERWRITES a host snapshot before the step that read it completed");
      host_slots_[m.dst] = slots_[m.src];
      host_slot_stamp_[m.dst] = slot_stamp_[m.src];
      host_turn_end_[m.dst].valid = false;
      host_slot_continuation_[m.dst] = slot_continuation_[m.src];
      host_slot_valid_[m.dst] = 1;
    }
    std::uint32_t tail_src = no_unit;
    for (const unit_move& m : t.kv_onboard) {
      expect(m.dst < blocks_.size() && m.src < host_blocks_.size(), "onboard: unit out of range");
      if (!failure.empty()) return no_unit;
      const auto b = static_cast<block_id>(m.dst);
      expect(reusable(block_touched_[b]), "onboard: into a block reused before its step completed");
      expect(!filling_kv_[m.src], "onboard: from a host unit a fetch still fills");
      blocks_[b] = host_blocks_[m.src];
      block_stamp_[b] = host_block_stamp_[m.src];
      block_written_[b] = now;
      block_continuation_[b] = host_block_continuation_[m.src];
      host_block_read_[m.src] = now;
      if (b == tail_dst) tail_src = m.src;
      ++stats.host_onboards;
    }
    return tail_src;
  }

  /// policy::remote_tier: prefetches `s`'s prompt, runs the puts the reservations caused, and answers every
  /// fetch from the store (`answer`; with turn ends, some later).
  ///
  /// Half the time (always with `remote_turn_ends`: a turn end is fetched only given what a probe found) it
  /// probes first: the probe must change nothing, and the prefetch then fetches only keys the store had.
  void prefetch(byte_source& in, const oracle_seq& s) {
    media_item item;
    const extra_keys keys = keys_of(s, item);
    if (++prefetches_ % 8 == 0) long_prompt(s, keys); // reads no byte and changes nothing
    const cache_metrics before = cache_.metrics();
    std::vector<content_key> present, listed_turn_ends;
    const bool probed = turn_ends_ || in.below(2) == 0;
    if (probed) {
      const observed unprobed = observe();
      auto listed = cache_.probe(s.tokens, keys);
      expect(listed.has_value(), "probe failed");
      if (!listed.has_value()) return;
      expect(observe() == unprobed && cache_.metrics() == before, "probe changed the cache");
      for (const remote_probe& k : listed->keys) {
        if (fleet_->store.contains(k.key)) present.push_back(k.key);
        if (k.item == remote_item::turn_end) listed_turn_ends.push_back(k.key);
      }
      ++stats.remote_probed;
    }
    auto plan = probed ? cache_.prefetch(s.tokens, keys, present) : cache_.prefetch(s.tokens, keys);
    expect(plan.has_value(), "prefetch failed");
    if (!plan.has_value()) return;
    unlisted_turn_ends_.clear();
    if (turn_ends_ && plan->fetches.empty() && cache_.metrics() == before) note_unlisted_turn_ends(s, listed_turn_ends);
    const std::vector<remote_fetch> fetches(plan->fetches.begin(), plan->fetches.end());
    std::vector<std::vector<std::uint32_t>> fetch_units; // turn ends' KV units
    for (const remote_fetch& f : fetches) fetch_units.emplace_back(f.kv_units.begin(), f.kv_units.end());
    if (probed)
      for (const remote_fetch& f : fetches)
        expect(std::find(present.begin(), present.end(), f.key) != present.end(),
               "prefetch: a key the probe did not find in the store is fetched");
    plan_turn_end(s, fetches);
    if (!failure.empty()) return;
    apply_transfers();
    for (std::size_t i = 0; i < fetches.size(); ++i) {
      const remote_fetch& f = fetches[i];
      expect(f.item != remote_item::turn_end || (turn_ends_ && probed),
             "prefetch: a turn end fetched unprobed, or with turn ends off");
      expect(f.item == remote_item::turn_end || f.kv_units.empty(), "prefetch: a block or snapshot fetch lists KV units");
      const bool block = f.item == remote_item::block;
      expect(f.unit < (block ? host_blocks_.size() : host_slots_.size()), "prefetch: unit out of range");
      if (!failure.empty()) return;
      expect(reusable(block ? host_block_read_[f.unit] : host_slot_read_[f.unit]),
             "prefetch: a unit read in a step not yet complete is written by a fetch");
      expect(!(block ? filling_kv_ : filling_snapshot_)[f.unit], "prefetch: a unit a fetch still fills is fetched into");
      for (const std::uint32_t u : fetch_units[i])
        expect(u == no_unit || (u < filling_kv_.size() && !filling_kv_[u]), "prefetch: a unit a fetch still fills is fetched into");
      if (!failure.empty()) return;
      // With turn ends, one fetch in four completes later, after other operations (a store's reply comes in a
      // later step): the units stay reserved, and nothing may read or overwrite them meanwhile.
      if (turn_ends_ && in.below(4) == 0) {
        oracle_seq prompt;
        prompt.tenant = s.tenant;
        prompt.tokens = s.tokens;
        (block ? filling_kv_ : filling_snapshot_)[f.unit] = 1;
        for (const std::uint32_t u : fetch_units[i])
          if (u != no_unit) filling_kv_[u] = 1;
        deferred_.push_back({{f.item, f.unit, f.key, f.header_bytes, {}}, fetch_units[i], std::move(prompt)});
        continue;
      }
      answer(in, s, f, fetch_units[i]);
      if (!failure.empty()) return;
    }
  }

  /// A continuation block's fetch (a turn end's link): a block fetch whose header holds B tokens and an
  /// origin, beside a prefill-exact block's B tokens alone.
  bool is_link(const remote_fetch& f) const noexcept {
    return f.item == remote_item::block && f.header_bytes == header_fixed + 4 * std::size_t{B} + origin_bytes;
  }

  /// `remote_turn_ends`: the turn end a plan fetches (one at most) and its links, the continuation blocks of
  /// the blocks the reader lacks, in block order (`turn_end_group`); no link without a turn end.
  void plan_turn_end(const oracle_seq& s, const std::vector<remote_fetch>& fetches) {
    const remote_fetch* te = nullptr;
    std::vector<std::uint32_t> links;
    for (const remote_fetch& f : fetches) {
      if (f.item == remote_item::turn_end) {
        expect(te == nullptr, "prefetch: two turn ends in one plan");
        te = &f;
      } else if (is_link(f)) {
        links.push_back(f.unit);
      }
    }
    expect(te != nullptr || links.empty(), "prefetch: a continuation block fetched without its turn end");
    if (te == nullptr || !failure.empty()) return;
    expect(te->kv_units.size() == 1, "prefetch: a turn end's fetch lists other KV units than its partial block's");
    expect(!groups_.contains(te->unit), "prefetch: a turn end fetched into a unit another turn end still fills");
    for (const std::uint32_t u : links)
      expect(u < link_owner_.size() && link_owner_[u] == no_unit, "prefetch: a link fetched into a unit another one fills");
    if (!failure.empty()) return;
    turn_end_group& g = groups_[te->unit];
    g.prompt.tenant = s.tenant;
    g.prompt.tokens = s.tokens;
    g.prompt.media_at = s.media_at;
    g.prompt.media_digest = s.media_digest;
    g.links = links;
    g.link_stamps.assign(links.size(), 0);
    g.waiting = static_cast<std::uint32_t>(links.size()) + 1;
    for (const std::uint32_t u : links) link_owner_[u] = te->unit;
  }

  /// `remote_turn_ends`, after a probe and a prefetch that changed nothing: the positions of the turn ends in
  /// the store that `s`'s prompt continues, in its last block boundary's block (floor(p/B) = floor((L - 1)/B),
  /// at or past any block the cache can match, which stops there), whose keys the probe did not list. The
  /// admit that follows tells whether one would restore more than the local tiers (`check_unlisted`).
  void note_unlisted_turn_ends(const oracle_seq& s, const std::vector<content_key>& listed) {
    const auto L = static_cast<std::uint32_t>(s.tokens.size());
    for (const auto& [key, v] : fleet_->store) {
      if (v.header.size() < header_fixed || v.header[8] != std::byte{2}) continue;
      const std::uint32_t p = header_u32(v.header, 12);
      if (p < L && p / B == (L - 1) / B && holds(v.unit.contents, s, p) &&
          std::find(listed.begin(), listed.end(), key) == listed.end())
        unlisted_turn_ends_.push_back(p);
    }
  }

  /// A probe lists a turn end at every block boundary from the one where the prompt's local match ends, up to
  /// as many blocks past it as the host tier has KV units, where it restores more than the local tiers
  /// (docs/tiers.md): the admit `plan` of the prompt `note_unlisted_turn_ends` saw restores what the local
  /// tiers do, and matched at least its kv_matched_tokens.
  void check_unlisted(const admit_plan& plan) {
    for (const std::uint32_t p : unlisted_turn_ends_)
      expect(p <= plan.usable_tokens || p / B > plan.kv_matched_tokens / B + cache_.host_kv_units(),
             "probe: a turn end of the store that the prompt continues and that restores more than the local tiers "
             "is not listed");
    unlisted_turn_ends_.clear();
  }

  /// A fetch answered later (`remote_turn_ends`): its KV units, and the prompt it was planned for.
  struct deferred_fetch {
    remote_fetch fetch;
    std::vector<std::uint32_t> kv;
    oracle_seq prompt;
  };

  /// Answers the fetches deferred so far, in the order they were planned.
  void answer_deferred(byte_source& in) {
    std::vector<deferred_fetch> due;
    due.swap(deferred_);
    for (const deferred_fetch& d : due) {
      (d.fetch.item == remote_item::block ? filling_kv_ : filling_snapshot_)[d.fetch.unit] = 0;
      for (const std::uint32_t u : d.kv)
        if (u != no_unit) filling_kv_[u] = 0;
    }
    for (const deferred_fetch& d : due) {
      answer(in, d.prompt, d.fetch, d.kv);
      if (!failure.empty()) return;
    }
  }

  /// Answers fetch `f` (`kv`: a turn end's KV units), planned for `s`'s prompt, from the store as it is now:
  /// usually as stored, one in eight as a miss, one in eight with a corrupted header and another prefix's
  /// contents written into the unit (the cache must drop it unused).
  void answer(byte_source& in, const oracle_seq& s, const remote_fetch& f, const std::vector<std::uint32_t>& kv) {
    const auto now = static_cast<std::int64_t>(cache_.current_epoch());
    const cache_metrics before = cache_.metrics();
    const bool block = f.item == remote_item::block;
    auto& units = block ? host_blocks_ : host_slots_;
    auto it = fleet_->store.find(f.key);
    const std::uint32_t roll = in.below(8);
    if (f.item == remote_item::turn_end) {
      fetch_turn_end(in, f, kv, it == fleet_->store.end() ? nullptr : &it->second, roll);
    } else if (block && f.unit < link_owner_.size() && link_owner_[f.unit] != no_unit) {
      fetch_link(in, f, it == fleet_->store.end() ? nullptr : &it->second, roll);
    } else if (it == fleet_->store.end() || roll == 0) {
      if (!block) host_turn_end_[f.unit].valid = false;
      expect(cache_.fetched(f.item, f.unit, {}).has_value(), "fetched (miss) failed");
    } else {
      if (!block) host_turn_end_[f.unit].valid = false;
      std::vector<std::byte> header = it->second.header;
      units[f.unit] = it->second.unit.contents;
      (block ? host_block_stamp_ : host_slot_stamp_)[f.unit] = it->second.unit.stamp;
      if (roll == 1) {
        header[header.size() / 2] ^= std::byte{0x40};
        units[f.unit] = content{s.tenant == 0 ? 1 : 0}; // contents that hold no prompt's prefix
        (block ? host_block_stamp_ : host_slot_stamp_)[f.unit] = stamp();
      }
      if (block) {
        host_block_continuation_[f.unit] = 0;
        host_block_read_[f.unit] = now;
      } else {
        host_slot_continuation_[f.unit] = 0;
        host_slot_valid_[f.unit] = 1;
        host_slot_read_[f.unit] = now;
      }
      expect(cache_.fetched(f.item, f.unit, header).has_value(), "fetched failed");
    }
    const cache_metrics& after = cache_.metrics();
    stats.remote_hits += after.remote_hits - before.remote_hits;
    stats.remote_rejected += after.remote_rejected - before.remote_rejected;
  }

  /// `remote_turn_ends`: answers turn-end fetch `f` (`kv`: its host KV unit, the partial block's) from
  /// `stored` (null: absent), scattering the payload as the engine does (the partial block into `kv`, then
  /// the snapshot into `f.unit`): as a miss when `roll` is 0; when it is 1, with a header corrupted where the
  /// reader can check it (the fixed fields, the tokens, the writer id in the origin of a full block: each is
  /// compared with the reader's own block or with the link's) and contents that hold no prompt's prefix,
  /// which the cache must reject; otherwise as stored (`report_part`).
  void fetch_turn_end(byte_source& in, const remote_fetch& f, const std::vector<std::uint32_t>& kv,
                      const shared_fleet::value* stored, std::uint32_t roll) {
    const auto now = static_cast<std::int64_t>(cache_.current_epoch());
    expect(kv.size() == 1 && kv[0] != no_unit, "prefetch: a turn end's partial block gets no unit");
    expect(groups_.contains(f.unit), "fetched: a turn end no plan listed");
    if (!failure.empty()) return;
    const std::uint32_t partial = kv[0];
    expect(partial < host_blocks_.size(), "prefetch: turn end KV unit out of range");
    if (!failure.empty()) return;
    expect(reusable(host_block_read_[partial]), "prefetch: a KV unit read in a step not yet complete is written by a turn-end fetch");
    if (!failure.empty()) return;
    host_turn_end_[f.unit].valid = false;
    turn_end_group& g = groups_[f.unit];
    std::vector<std::byte> header;
    if (stored == nullptr || roll == 0 || stored->kv.size() != 1) {
      g.missing = true;
      report_part(remote_item::turn_end, f.unit, header, f.unit);
      return;
    }
    const bool corrupt = roll == 1;
    const content elsewhere{g.prompt.tenant == 0 ? 1 : 0}; // contents that hold no prompt's prefix
    host_blocks_[partial] = corrupt ? elsewhere : stored->kv[0].contents;
    host_block_stamp_[partial] = corrupt ? stamp() : stored->kv[0].stamp;
    host_block_continuation_[partial] = 1;
    host_block_read_[partial] = now;
    host_slots_[f.unit] = corrupt ? elsewhere : stored->unit.contents;
    host_slot_stamp_[f.unit] = corrupt ? stamp() : stored->unit.stamp;
    host_slot_continuation_[f.unit] = 1;
    host_slot_valid_[f.unit] = 1;
    host_slot_read_[f.unit] = now;
    header = stored->header;
    g.header = stored->header;
    g.snapshot = stored->unit;
    g.partial = stored->kv[0];
    if (corrupt) {
      // A byte of the fixed fields or the tokens, or of the writer id in the origin of a full block: no cache
      // of the fleet has the id it becomes. (A serial could become that of another block of the same writer,
      // which the reader might hold or fetch: the header would then be one the reader cannot tell from a true
      // one.) The partial block's origin is the one nothing checks.
      const std::uint32_t position = header_u32(header, 12), tokens = header_u32(header, 16);
      const std::size_t origins = header_fixed + 4 * std::size_t{tokens};
      const std::size_t full = position / B >= (position - tokens) / B ? position / B - (position - tokens) / B : 0;
      const std::size_t at = 8 + in.below(static_cast<std::uint32_t>(origins - 8 + 8 * full));
      header[at < origins ? at : origins + (at - origins) / 8 * origin_bytes + (at - origins) % 8] ^= std::byte{0x40};
      g.corrupt = true;
    }
    report_part(remote_item::turn_end, f.unit, header, f.unit);
  }

  /// `remote_turn_ends`: answers link fetch `f` (a continuation block of a planned turn end) from `stored`
  /// (null: absent) into its KV unit: as a miss when `roll` is 0; when it is 1, with a header corrupted in
  /// its fixed fields or tokens and contents that hold no prompt's prefix; otherwise as stored, which may be
  /// another computation of the same tokens than the one the turn end lists (then the turn end is refused).
  void fetch_link(byte_source& in, const remote_fetch& f, const shared_fleet::value* stored, std::uint32_t roll) {
    const auto now = static_cast<std::int64_t>(cache_.current_epoch());
    const std::uint32_t owner = std::exchange(link_owner_[f.unit], no_unit);
    turn_end_group& g = groups_[owner];
    const auto j = static_cast<std::size_t>(std::find(g.links.begin(), g.links.end(), f.unit) - g.links.begin());
    expect(j < g.links.size(), "fetched: a link its turn end does not list");
    if (!failure.empty()) return;
    std::vector<std::byte> header;
    if (stored == nullptr || roll == 0 || stored->header.size() <= 8 + origin_bytes) {
      g.missing = true;
      g.link_missing = true;
    } else {
      const bool corrupt = roll == 1;
      header = stored->header;
      host_blocks_[f.unit] = corrupt ? content{g.prompt.tenant == 0 ? 1 : 0} : stored->unit.contents;
      host_block_stamp_[f.unit] = corrupt ? stamp() : stored->unit.stamp;
      host_block_continuation_[f.unit] = 1;
      host_block_read_[f.unit] = now;
      g.link_stamps[j] = host_block_stamp_[f.unit];
      if (corrupt) {
        header[8 + in.below(static_cast<std::uint32_t>(header.size() - 8 - origin_bytes))] ^= std::byte{0x40};
        g.corrupt = true;
      }
    }
    report_part(remote_item::block, f.unit, header, owner);
  }

  /// Reports a part of turn end `owner` (its own value, or a link into KV unit `unit`). The cache counts the
  /// turn end once, when its last part reports: kept, rejected or a miss; never kept with a part missing or
  /// corrupted, and kept only as the prompt's own prefix below its length, over links of the computation
  /// its header lists. The host snapshot unit then remembers the writer's stamps, which a restore from it
  /// must meet (`check_fetched_turn_end`).
  void report_part(remote_item item, std::uint32_t unit, std::span<const std::byte> header, std::uint32_t owner) {
    const cache_metrics before = cache_.metrics();
    expect(cache_.fetched(item, unit, header).has_value(), "fetched (a turn end's part) failed");
    const cache_metrics& after = cache_.metrics();
    const std::uint64_t hits = after.remote_turn_end_hits - before.remote_turn_end_hits,
                        rejected = after.remote_rejected - before.remote_rejected,
                        misses = after.remote_misses - before.remote_misses;
    turn_end_group& g = groups_[owner];
    if (--g.waiting != 0) {
      expect(hits + rejected + misses == 0, "fetched: a turn end counted before every part of it reported");
      return;
    }
    const turn_end_group done = std::move(g);
    groups_.erase(owner);
    expect(hits + rejected + misses == 1, "fetched: a turn end neither kept, rejected nor missed once, all its parts reported");
    const bool kept = hits != 0;
    if (done.corrupt || done.missing) {
      expect(!kept, done.corrupt ? "fetched: KEPT a turn end with a corrupted part" : "fetched: KEPT a turn end with a part missing");
      expect(!done.corrupt || done.missing || rejected == 1, "fetched: a turn end with a corrupted part not counted rejected");
      stats.remote_turn_ends_corrupted += done.corrupt;
      stats.remote_turn_ends_link_lost += done.link_missing;
      return;
    }
    stats.remote_turn_ends_refused += !kept;
    if (!kept || !failure.empty()) return;
    ++stats.remote_turn_end_hits;
    const std::uint32_t position = header_u32(done.header, 12), first = (position - header_u32(done.header, 16)) / B;
    expect(position < done.prompt.tokens.size() && holds(done.snapshot.contents, done.prompt, position),
           "fetched: KEPT a turn end that is not the prompt's own prefix below its length");
    const std::size_t parts = position / B - first + 1;
    expect(parts >= done.links.size() + 1 && done.header.size() >= origin_bytes * parts,
           "fetched: KEPT a turn end of fewer blocks than its links");
    if (!failure.empty()) return;
    const std::size_t own = parts - 1 - done.links.size(), origins = done.header.size() - origin_bytes * parts;
    fetched_turn_end& t = host_turn_end_[owner];
    t.kv.clear();
    for (std::size_t j = 0; j + 1 < parts && failure.empty(); ++j) {
      const std::size_t at = origins + origin_bytes * j;
      const auto it = fleet_->origins.find({header_u64(done.header, at), header_u64(done.header, at + 8)});
      expect(it != fleet_->origins.end(), "fetched: KEPT a turn end listing a block no put named");
      if (!failure.empty()) return;
      if (j >= own)
        expect(done.link_stamps[j - own] == it->second.stamp,
               "fetched: KEPT a turn end over a continuation block of another computation than the one it lists");
      t.kv.push_back(it->second.stamp);
    }
    if (!failure.empty()) return;
    t.kv.push_back(done.partial.stamp);
    t.valid = true;
    t.first = first;
    t.position = position;
    t.snapshot = done.snapshot.stamp;
    stats.remote_links_kept += done.links.size();
  }

  /// A restore from host snapshot unit `u`, which a fetched turn end filled: exactly the bytes its writer
  /// had. It restores at the turn end's position, over KV blocks that before the writer's prefill-exact lead
  /// d are prefill-exact, and from d on (matched here, or fetched with it) and in the partial block (copied
  /// on the GPU, or onboarded from `host_copy`) hold the writes the writer's blocks held: their stamps, not
  /// another computation of the same tokens.
  void check_fetched_turn_end(const admit_plan& plan, std::uint32_t u, std::uint32_t host_copy) {
    const fetched_turn_end& t = host_turn_end_[u];
    const std::uint32_t full = t.position / B;
    expect(host_slot_stamp_[u] == t.snapshot, "admit: a fetched turn end's snapshot unit was overwritten unseen");
    expect(plan.usable_tokens == t.position && plan.shared_blocks >= full && t.kv.size() == full - t.first + 1,
           "admit: a fetched turn end restored at another position than its own");
    if (!failure.empty()) return;
    const auto table = plan.block_table;
    for (std::uint32_t i = 0; i < full && failure.empty(); ++i) {
      if (i < t.first)
        expect(!block_continuation_[table[i]],
               "admit: RESTORE of a fetched turn end over a decode-filled block before its writer's prefill-exact lead");
      else
        expect(block_stamp_[table[i]] == t.kv[i - t.first],
               "admit: RESTORE of a fetched turn end over a KV block of another computation than its writer's");
    }
    if (t.position % B != 0) {
      const std::uint64_t partial = host_copy != no_unit          ? block_stamp_[table[plan.shared_blocks]]
                                    : plan.copy_src != no_block ? block_stamp_[plan.copy_src]
                                                                : 0;
      expect(partial != 0 && partial == t.kv.back(),
             "admit: RESTORE of a fetched turn end with a partial block of another computation than its writer's");
    }
    ++stats.restores_fetched_turn_end;
  }

  /// `s`'s prompt followed by 2^18 more tokens: a probe lists no more blocks than the host tier has units
  /// (of the chain; with turn ends as many continuation blocks again), whatever the prompt's length (it once hashed every block of it and sized a key memo to it), and neither
  /// it nor a prefetch given that the store has none of them changes anything.
  void long_prompt(const oracle_seq& s, const extra_keys& keys) {
    std::vector<token_id> prompt = s.tokens;
    prompt.resize(prompt.size() + (std::size_t{1} << 18), static_cast<token_id>(50001));
    const observed before = observe();
    auto listed = cache_.probe(prompt, keys);
    expect(listed.has_value(), "long probe failed");
    if (!listed.has_value()) return;
    const auto blocks_listed = std::count_if(listed->keys.begin(), listed->keys.end(),
                                             [](const remote_probe& k) { return k.item == remote_item::block; });
    // The chain's blocks, and with turn ends the continuation blocks of the same positions, each at most as
    // many as the host tier has units.
    expect(static_cast<std::size_t>(blocks_listed) <= (turn_ends_ ? 2 : 1) * std::size_t{cache_.host_kv_units()},
           "long probe: more blocks than host units");
    const std::vector<content_key> none;
    auto plan = cache_.prefetch(prompt, keys, none);
    expect(plan.has_value() && plan->fetches.empty(), "long prefetch of nothing the store has fetched something");
    expect(observe() == before, "long probe or prefetch changed the cache");
  }

  /// The first commit, or the end, of a sequence: what it held in the host tier was read in this step.
  void release_host_holds(oracle_seq& s) {
    const auto now = static_cast<std::int64_t>(cache_.current_epoch());
    if (s.host_restore != no_unit) host_slot_read_[s.host_restore] = now;
    if (s.host_copy != no_unit) host_block_read_[s.host_copy] = now;
    s.host_restore = s.host_copy = no_unit;
  }

  /// Every live sequence's blocks still hold its own prefix over the range its KV is valid.
  void check_live_contents() {
    for (const auto& [id, s] : seqs_) {
      const auto table = cache_.block_table(id);
      for (std::uint32_t i = 0; i < table.size() && i * B < s.valid; ++i)
        if (!holds(blocks_[table[i]], s, std::min(s.valid, (i + 1) * B))) {
          fail("a live sequence's block was overwritten (seq " + std::to_string(id) + ", block index " +
               std::to_string(i) + ")");
          return;
        }
    }
  }

  Cache cache_;
  const std::uint32_t B; // block size
  const std::uint32_t A; // alignment unit
  const bool share_in_step_;
  const bool repeat_openings_;
  const bool turn_ends_; // cache_options::remote_turn_ends
  std::uint64_t prefetches_ = 0;
  const std::uint32_t interval_;     // decode checkpoint interval (0: none)
  const std::uint32_t per_sequence_; // decode checkpoints a sequence keeps
  const bool model_checkpoint_bound_;
  std::vector<content> blocks_, slots_;
  // share_in_step: what a pending block will hold, whether it is pending (its writer admitted in this step
  // and not committed), and whether its writer's first commit in the step wrote it.
  std::vector<content> planned_;
  std::vector<std::uint8_t> pending_, written_in_step_;
  std::vector<std::uint8_t> block_continuation_, slot_continuation_; // what the engine wrote is decode_continuation
  std::vector<std::int64_t> block_touched_, slot_touched_;
  // The step that last wrote each GPU block and slot (a write-through put reads it once that step completed).
  std::vector<std::int64_t> block_written_, slot_written_;
  // Per slot: whether it may hold a published snapshot (written and committed or finished since it was
  // last handed out, not known to be dropped); the step that wrote a turn end (restorable once it
  // completes); how often it was handed out; what wrote it.
  std::vector<std::uint8_t> slot_published_;
  std::vector<std::int64_t> slot_ready_;
  std::vector<std::uint64_t> slot_generation_;
  std::vector<std::uint64_t> block_generation_; // bumped each time a block is handed out (taken fresh)
  std::vector<origin> slot_origin_;
  // policy::host_tier, per host unit: what it holds, whether that is decode_continuation, the step that
  // last read it (onboard, restore), and for snapshot units whether a published snapshot was offloaded
  // into it.
  std::vector<content> host_blocks_, host_slots_;
  std::vector<std::uint8_t> host_block_continuation_, host_slot_continuation_, host_slot_valid_;
  std::vector<std::int64_t> host_block_read_, host_slot_read_;
  // The stamp of what each GPU block and slot and each host unit holds (shared_fleet).
  std::vector<std::uint64_t> block_stamp_, slot_stamp_, host_block_stamp_, host_slot_stamp_;
  // `remote_turn_ends`, by host snapshot unit: the turn end a fetch filled it with, while it holds that.
  struct fetched_turn_end {
    bool valid = false;
    std::uint32_t first = 0;             // the writer's prefill-exact lead, in blocks (d)
    std::uint32_t position = 0;          // p
    std::vector<std::uint64_t> kv;       // the stamps of blocks d .. floor(p/B) - 1, then the partial block's
    std::uint64_t snapshot = 0;          // the snapshot's stamp
  };
  std::vector<fetched_turn_end> host_turn_end_;
  // `remote_turn_ends`: a planned turn end and its links, until its last part reports.
  struct turn_end_group {
    oracle_seq prompt;                       // the tenant, tokens and media item of the prompt it was planned for
    std::vector<std::uint32_t> links;        // the links' host KV units, in block order
    std::vector<std::uint64_t> link_stamps;  // the stamp each link's unit was given (0: not filled)
    std::uint32_t waiting = 0;               // parts not reported yet
    bool missing = false, corrupt = false;   // a part answered as a miss, or corrupted
    bool link_missing = false;               // of them, a link
    std::vector<std::byte> header;           // the turn end's value as stored when answered
    shared_fleet::part snapshot, partial;
  };
  std::map<std::uint32_t, turn_end_group> groups_; // by the turn end's host snapshot unit
  std::vector<std::uint32_t> link_owner_;          // by host KV unit: the turn end a link fetch fills it for
  // `remote_turn_ends`: the turn ends of the store the last probe left out (`note_unlisted_turn_ends`).
  std::vector<std::uint32_t> unlisted_turn_ends_;
  // `remote_turn_ends`: fetches answered later, and the host units they fill meanwhile.
  std::vector<deferred_fetch> deferred_;
  std::vector<std::uint8_t> filling_kv_, filling_snapshot_;
  // The store, the conversations that ended and the stamps, shared with the stream's other caches.
  std::shared_ptr<shared_fleet> fleet_;
  std::map<seq_id, oracle_seq> seqs_;
  std::vector<std::vector<token_id>> bases_;
  /// The media digests prompts carry (`oracle_seq::media_digest`).
  const std::array<std::array<std::byte, 3>, 2> media_digests_{{{std::byte{1}, std::byte{2}, std::byte{3}},
                                                                {std::byte{1}, std::byte{2}, std::byte{4}}}};
  seq_id next_id_ = 1;
  epoch_t safe_before_ = 0;
};

} // namespace reprise::testing
