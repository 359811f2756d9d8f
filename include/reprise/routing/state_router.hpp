// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `state_router`: which engine of a fleet should serve a prompt, judged by the prefill each engine would
/// skip, from what the engines report they hold.
///
/// Engines report what they store and drop (`state_event`: KV blocks and recurrent-state snapshots, by content
/// key, with their exactness class and position). The router keeps, per engine, an index of at most
/// `router_options::entries_per_engine` of them, least recently reported first out. `route` hashes the prompt
/// into its chain of block keys once, scores every engine by the tokens a hit there could skip, and picks the
/// deepest among the engines whose load is under their cap (docs/routing.md).
///
/// The router holds names, never state: it is an estimate. A lost `removed` event makes it send a prompt
/// where the state is gone; the engine's cache, which verifies every hit against its own tokens, then
/// computes the prefill: a wrong route costs a miss, never a wrong hit.
///
/// The router does no I/O and owns no thread: the caller delivers events and calls `route`, from one thread
/// at a time (or under its own lock).

#include <reprise/errc.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/media_keys.hpp>
#include <reprise/keys/state_keys.hpp>
#include <reprise/state/model_config.hpp>

#include <boost/intrusive/list.hpp>
#include <boost/intrusive/unordered_set.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

namespace reprise::routing {

/// An engine of the fleet, in [0, router_options::engines).
using engine_id = std::uint32_t;

/// The most engines one router scores.
inline constexpr std::uint32_t max_engines = 1u << 16;

/// The event vocabulary (`state_kind`, `state_change`, `state_event`) and the key source are the keys layer's
/// (<reprise/keys/state_keys.hpp>), so a cache can report its events (`cache_options::state_events`) without
/// knowing the router.
template <class K>
concept route_key_source = state_key_source<K>;
using reprise::state_change;
using reprise::state_event;
using reprise::state_kind;

/// How a router is set up. `for_model` fills the model's three fields from a `model_config`.
struct router_options {
  /// Engines, numbered 0 .. engines - 1. In [1, max_engines].
  std::uint32_t engines = 1;
  /// The model's key block size B (its KV block size): positions of block events are multiples of it.
  std::uint32_t block_size = 16;
  /// The alignment unit (a positive multiple of B): prefill-exact snapshots sit at its multiples.
  std::uint32_t alignment = 16;
  /// A hybrid model: a prompt skips only up to a snapshot. False: attention only, every matched block counts
  /// and snapshot events are refused.
  bool has_recurrent = true;
  /// Count decode-continuation blocks and snapshots too (the cache's `accept_any`, policy `chat`); false
  /// counts prefill-exact state only (`accept_prefill_exact`, policy `strict`), matching the engines' policy.
  bool accept_decode_continuation = false;
  /// The most entries (blocks and snapshots together) the index keeps per engine, in [1, max_pool_ids];
  /// engines x entries_per_engine is at most max_pool_ids. All of it is allocated by `make`.
  std::uint32_t entries_per_engine = 1u << 16;
  /// How far above an even share of the fleet's load an engine may be and still be chosen (>= 0, finite):
  /// its cap is (sum of loads + 1) / engines x (1 + load_slack).
  double load_slack = 0.25;
  /// `route` looks at the first min(L - 1, max_prompt_tokens) positions of a prompt of L tokens; its scratch
  /// keys for max_prompt_tokens / B blocks are allocated by `make`. In [1, 2^32 - 1].
  std::uint64_t max_prompt_tokens = 1u << 20;

  /// The model's block size, alignment unit and whether it has recurrent layers; the rest as given.
  static router_options for_model(const model_config& model, std::uint32_t engines,
                                  bool accept_decode_continuation = false) noexcept {
    router_options o;
    o.engines = engines;
    o.block_size = model.block_size();
    o.alignment = model.alignment();
    o.has_recurrent = model.has_recurrent();
    o.accept_decode_continuation = accept_decode_continuation;
    return o;
  }

  /// Errors: `invalid_argument` (engines, block_size, entries_per_engine or max_prompt_tokens outside its
  /// range, too many entries in all, a negative, infinite or NaN load_slack, an alignment of 0),
  /// `misaligned` (an alignment that is not a multiple of block_size).
  errc validate() const noexcept {
    if (engines == 0 || engines > max_engines || block_size == 0 || alignment == 0) return errc::invalid_argument;
    if (entries_per_engine == 0 || std::uint64_t{engines} * entries_per_engine > max_pool_ids)
      return errc::invalid_argument;
    if (!std::isfinite(load_slack) || load_slack < 0) return errc::invalid_argument;
    if (max_prompt_tokens == 0 || max_prompt_tokens > std::numeric_limits<std::uint32_t>::max())
      return errc::invalid_argument;
    if (alignment % block_size != 0) return errc::misaligned;
    return errc{};
  }
};

/// What `route` decided.
struct route_choice {
  engine_id engine = 0;              ///< where to send the prompt
  std::uint64_t usable_tokens = 0;   ///< the prefill it would skip there
  engine_id best_engine = 0;         ///< the engine with the most usable tokens, loads aside
  std::uint64_t best_usable_tokens = 0;
  bool redirected_by_load = false;   ///< best_engine was over its load cap (then engine != best_engine)
  friend constexpr bool operator==(const route_choice&, const route_choice&) = default;
};

namespace detail {

/// Content keys are uniformly distributed digests: any 8 of their bytes make a good hash.
inline std::size_t key_hash(const content_key& k) noexcept {
  std::uint64_t h;
  std::memcpy(&h, k.bytes.data(), sizeof h);
  return static_cast<std::size_t>(h);
}

using lru_hook = boost::intrusive::list_member_hook<>;
using table_hook = boost::intrusive::unordered_set_member_hook<>;

/// One block or snapshot an engine reported, in its engine's LRU list (or on the free list) and, while
/// held, in the index by identity and (snapshots) by parent key.
struct state_entry {
  content_key key{};
  content_key parent{};
  std::uint64_t position = 0;
  state_kind kind = state_kind::kv_block;
  exactness exact = exactness::prefill_exact;
  lru_hook lru_link;
  table_hook key_link;
  table_hook parent_link;
};

/// An entry's identity, as a lookup names it.
struct state_probe {
  const content_key* key;
  state_kind kind;
  exactness exact;
};

/// One engine's index: a fixed node array of `capacity` entries, an LRU list (front: least recently
/// reported), the held entries by identity, the held snapshots by parent key. Buckets are allocated once
/// (a power of two >= capacity), so no event allocates.
class engine_index {
  static std::size_t tag(state_kind kind, exactness exact) noexcept {
    return (static_cast<std::size_t>(kind) << 1) | static_cast<std::size_t>(exact);
  }
  struct identity_hash {
    std::size_t operator()(const state_entry& e) const noexcept { return key_hash(e.key) ^ tag(e.kind, e.exact); }
    std::size_t operator()(const state_probe& p) const noexcept { return key_hash(*p.key) ^ tag(p.kind, p.exact); }
  };
  struct identity_equal {
    bool operator()(const state_entry& a, const state_entry& b) const noexcept { return &a == &b; }
    bool operator()(const state_probe& p, const state_entry& e) const noexcept {
      return e.kind == p.kind && e.exact == p.exact && e.key == *p.key;
    }
  };
  struct parent_hash {
    std::size_t operator()(const state_entry& e) const noexcept { return key_hash(e.parent); }
    std::size_t operator()(const content_key& k) const noexcept { return key_hash(k); }
  };
  struct parent_equal {
    bool operator()(const state_entry& a, const state_entry& b) const noexcept { return a.parent == b.parent; }
    bool operator()(const content_key& k, const state_entry& e) const noexcept { return e.parent == k; }
  };
  using lru_list =
      boost::intrusive::list<state_entry, boost::intrusive::member_hook<state_entry, lru_hook, &state_entry::lru_link>>;
  /// An intrusive hash table (`unordered_set` or `unordered_multiset`) of entries through hook `Link`.
  template <template <class, class...> class Table, table_hook state_entry::*Link, class Hash, class Equal>
  using entry_table = Table<state_entry, boost::intrusive::member_hook<state_entry, table_hook, Link>,
                            boost::intrusive::hash<Hash>, boost::intrusive::equal<Equal>,
                            boost::intrusive::power_2_buckets<true>, boost::intrusive::constant_time_size<true>>;
  using key_set = entry_table<boost::intrusive::unordered_set, &state_entry::key_link, identity_hash, identity_equal>;
  using parent_set =
      entry_table<boost::intrusive::unordered_multiset, &state_entry::parent_link, parent_hash, parent_equal>;

public:
  explicit engine_index(std::uint32_t capacity)
      : nodes_(std::make_unique<state_entry[]>(capacity)),
        key_buckets_(std::bit_ceil(std::max<std::size_t>(capacity, 2))),
        parent_buckets_(key_buckets_.size()),
        by_key_(typename key_set::bucket_traits(key_buckets_.data(), key_buckets_.size())),
        by_parent_(typename parent_set::bucket_traits(parent_buckets_.data(), parent_buckets_.size())) {
    for (std::uint32_t i = 0; i < capacity; ++i) free_.push_back(nodes_[i]);
  }
  engine_index(const engine_index&) = delete;
  engine_index& operator=(const engine_index&) = delete;
  ~engine_index() {
    by_parent_.clear();
    by_key_.clear();
    lru_.clear();
    free_.clear();
  }

  /// The held entry named (kind, key, class), or null. O(1) expected.
  const state_entry* find(state_kind kind, const content_key& key, exactness exact) const noexcept {
    auto it = by_key_.find(state_probe{&key, kind, exact}, identity_hash{}, identity_equal{});
    return it == by_key_.end() ? nullptr : &*it;
  }

  /// Holds `e` as the most recently reported entry: a touch when held, else an insert that first evicts
  /// the least recently reported entry when all `capacity` are held. O(1) expected.
  void store(const state_event& e) noexcept {
    if (state_entry* held = mutable_find(e.kind, e.key, e.exact)) {
      lru_.erase(lru_.iterator_to(*held));
      lru_.push_back(*held);
      return;
    }
    if (free_.empty()) unlink(lru_.front());
    state_entry& n = free_.front();
    free_.pop_front();
    n.key = e.key;
    n.parent = e.parent;
    n.position = e.position;
    n.kind = e.kind;
    n.exact = e.exact;
    lru_.push_back(n);
    by_key_.insert(n);
    if (n.kind == state_kind::snapshot) by_parent_.insert(n);
  }

  /// Drops the entry `e` names; nothing when none is held. O(1) expected.
  void remove(const state_event& e) noexcept {
    if (state_entry* held = mutable_find(e.kind, e.key, e.exact)) unlink(*held);
  }

  /// Calls `f(entry)` for every held snapshot whose parent key is `parent`. O(1) expected plus the snapshots
  /// registered under that key.
  template <class F>
  void for_each_snapshot_under(const content_key& parent, F&& f) const {
    auto [it, end] = by_parent_.equal_range(parent, parent_hash{}, parent_equal{});
    for (; it != end; ++it) f(*it);
  }

  void clear() noexcept {
    while (!lru_.empty()) unlink(lru_.front());
  }
  std::size_t size() const noexcept { return lru_.size(); }

  /// The bytes an index of `capacity` entries allocates.
  static std::size_t bytes_for(std::uint32_t capacity) noexcept {
    const std::size_t buckets = std::bit_ceil(std::max<std::size_t>(capacity, 2));
    return sizeof(engine_index) + std::size_t{capacity} * sizeof(state_entry) +
           buckets * (sizeof(typename key_set::bucket_type) + sizeof(typename parent_set::bucket_type));
  }

private:
  state_entry* mutable_find(state_kind kind, const content_key& key, exactness exact) noexcept {
    auto it = by_key_.find(state_probe{&key, kind, exact}, identity_hash{}, identity_equal{});
    return it == by_key_.end() ? nullptr : &*it;
  }
  void unlink(state_entry& n) noexcept {
    by_key_.erase(by_key_.iterator_to(n));
    if (n.kind == state_kind::snapshot) by_parent_.erase(by_parent_.iterator_to(n));
    lru_.erase(lru_.iterator_to(n));
    free_.push_front(n);
  }

  // Declared first, destroyed last: the containers below unlink the nodes before they go.
  std::unique_ptr<state_entry[]> nodes_;
  std::vector<typename key_set::bucket_type> key_buckets_;
  std::vector<typename parent_set::bucket_type> parent_buckets_;
  lru_list lru_;
  lru_list free_;
  key_set by_key_;
  parent_set by_parent_;
};

} // namespace detail

/// The router: per-engine indexes fed by `apply`, and `route`.
///
/// `Keys` computes the prompt's keys the way the engines computed the keys they report (`route_key_source`;
/// `fleet_keys` for the content keys of docs/key-format.md). The router keeps a pointer to it: the key
/// source must outlive the router.
///
/// Memory: `make` allocates everything: per engine, `entries_per_engine` entries and two bucket arrays of
/// bit_ceil(entries_per_engine) pointers (`memory_bytes()`), plus route's scratch (a key per block of
/// max_prompt_tokens, three words per engine). Nothing grows afterwards, whatever the events.
template <route_key_source Keys>
class state_router {
public:
  /// Errors: those of `router_options::validate`. Throws `std::bad_alloc` when the indexes do not fit.
  static result<state_router> make(const router_options& options, const Keys& keys) {
    if (const errc e = options.validate(); e != errc{}) return failure{e};
    return state_router(options, keys);
  }
  /// The router would outlive a temporary key source.
  static result<state_router> make(const router_options&, const Keys&&) = delete;

  state_router(state_router&&) noexcept = default;
  state_router& operator=(state_router&&) noexcept = default;

  const router_options& options() const noexcept { return options_; }

  /// Applies one report of `engine`: a `stored` holds the entry as the most recently reported (evicting the
  /// engine's least recently reported entry when it holds `entries_per_engine`), a `removed` drops it.
  ///
  /// Errors, changing nothing: `out_of_range` (no such engine), `invalid_argument` (a change, kind or class
  /// outside its enumeration, a position of 0, a snapshot on a model without recurrent layers),
  /// `misaligned` (a block end that is not a multiple of B, a prefill-exact snapshot off the alignment unit).
  /// Complexity: O(1) expected; no allocation.
  result<void> apply(engine_id engine, const state_event& event) noexcept {
    if (engine >= options_.engines) return failure{errc::out_of_range};
    if (const errc e = check(event); e != errc{}) return failure{e};
    detail::engine_index& index = *indexes_[engine];
    if (event.change == state_change::stored) index.store(event);
    else index.remove(event);
    return {};
  }

  /// The error `apply(engine, event)` returns for an engine of the fleet, `errc{}` when it would apply `event`:
  /// a front end that takes events in batches checks all of them before applying any. Complexity: O(1).
  errc validate(const state_event& event) const noexcept { return check(event); }

  /// Forgets everything `engine` reported (it restarted, or lost its state): it scores 0 until it reports
  /// again. Errors: `out_of_range`. Complexity: linear in its entries.
  result<void> clear(engine_id engine) noexcept {
    if (engine >= options_.engines) return failure{errc::out_of_range};
    indexes_[engine]->clear();
    return {};
  }

  /// Whether `engine`'s index holds the entry named (kind, key, class). False for an unknown engine.
  bool holds(engine_id engine, state_kind kind, const content_key& key, exactness exact) const noexcept {
    return engine < options_.engines && indexes_[engine]->find(kind, key, exact) != nullptr;
  }
  /// The entries `engine`'s index holds (at most entries_per_engine). 0 for an unknown engine.
  std::size_t entries(engine_id engine) const noexcept {
    return engine < options_.engines ? indexes_[engine]->size() : 0;
  }
  /// The bytes the indexes allocated (fixed at `make`).
  std::size_t memory_bytes() const noexcept {
    return std::size_t{options_.engines} * detail::engine_index::bytes_for(options_.entries_per_engine);
  }

  /// Chooses the engine for a prompt of L tokens under extra keys `extra`; `loads[e]` is engine e's load, a
  /// figure the engines supply (queued requests, queued prefill tokens in thousands: any unit in which 1 is
  /// a small amount of work), non-negative and finite.
  ///
  /// Score: engine e's usable tokens u_e, the prefill a hit there could skip, among positions p <=
  /// min(L - 1, max_prompt_tokens):
  /// - hybrid model: the deepest p such that e holds every block before floor(p/B) (blocks 0 ..
  ///   floor(p/B) - 1) and a snapshot at exactly p whose key, computed from the prompt's own tokens, it
  ///   holds; 0 if none. A decode-continuation snapshot at p off the block grid carries its tail tokens
  ///   [floor(p/B) B, p) in its key, so it counts only for a prompt that continues them exactly.
  /// - attention only: B times the number of leading blocks e holds.
  /// Only state of an accepted class counts (`accept_decode_continuation`). `usable_tokens()` and
  /// `matched_tokens()` give every engine's figures afterwards.
  ///
  /// Choice: engine e is under its cap when loads[e] <= (sum of loads + 1) / engines x (1 + load_slack)
  /// (the least loaded engine always is). Among those, the most usable tokens wins; ties go to the lower
  /// load, then the lower id. So with nothing usable anywhere, the least loaded engine wins.
  /// `best_engine` is the winner by the same order over all engines; when it is over its cap the choice is
  /// another engine, and `redirected_by_load` says so.
  ///
  /// Media items key the blocks and snapshots from their positions on, as in the engines' caches: a prompt
  /// with an image scores the blocks before it like the same text prompt.
  ///
  /// Errors: `size_mismatch` (loads.size() != engines), `invalid_argument` (a negative, infinite or NaN
  /// load; media items out of order, at one position twice, or with a digest over
  /// max_multimodal_digest_bytes), `out_of_range` (a media item at or past the prompt's end). A key the
  /// source cannot compute (all zeros) ends the walk: what follows scores as unmatched.
  ///
  /// Complexity: one `chain` per prompt block up to one past the deepest block any engine holds (the walk
  /// stops when no engine holds the next block), plus one lookup per engine still matching at each block;
  /// for a hybrid model, per engine, one parent-key lookup per block boundary from its deepest matched block
  /// down to the first that yields a snapshot, and one `snapshot` computation per distinct (position, class)
  /// candidate found there (shared between engines). No allocation.
  result<route_choice> route(std::span<const token_id> prompt, const extra_keys& extra,
                             std::span<const double> loads) noexcept {
    if (loads.size() != options_.engines) return failure{errc::size_mismatch};
    double total = 0;
    for (double load : loads) {
      if (!std::isfinite(load) || load < 0) return failure{errc::invalid_argument};
      total += load;
    }
    if (const errc e = check_media(extra.media, prompt.size()); e != errc{}) return failure{e};
    score(prompt, extra);
    return choose(loads, total);
  }

  /// Per engine, the usable tokens of the last `route` (zeros before the first).
  std::span<const std::uint64_t> usable_tokens() const noexcept { return usable_; }
  /// Per engine, the KV-matched tokens of the last `route`: B times the leading prompt blocks it holds. On
  /// a hybrid model the difference to `usable_tokens()` is what a missing snapshot costs.
  std::span<const std::uint64_t> matched_tokens() const noexcept { return matched_; }

private:
  struct confirmed_snapshot {
    std::uint64_t position;
    exactness exact;
    content_key key;
  };
  /// Snapshot keys one route remembers for other engines; beyond that many, they are recomputed.
  static constexpr std::size_t confirmed_capacity = 64;

  state_router(const router_options& options, const Keys& keys)
      : options_(options), keys_(&keys), chain_(options.max_prompt_tokens / options.block_size + 1),
        usable_(options.engines), matched_(options.engines), walking_(options.engines) {
    indexes_.reserve(options.engines);
    for (std::uint32_t e = 0; e < options.engines; ++e)
      indexes_.push_back(std::make_unique<detail::engine_index>(options.entries_per_engine));
    confirmed_.reserve(confirmed_capacity);
  }

  bool accepts(exactness e) const noexcept {
    return e == exactness::prefill_exact || options_.accept_decode_continuation;
  }

  errc check(const state_event& e) const noexcept {
    if (e.change != state_change::stored && e.change != state_change::removed) return errc::invalid_argument;
    if (e.exact != exactness::prefill_exact && e.exact != exactness::decode_continuation)
      return errc::invalid_argument;
    if (e.position == 0) return errc::invalid_argument;
    switch (e.kind) {
    case state_kind::kv_block: return e.position % options_.block_size == 0 ? errc{} : errc::misaligned;
    case state_kind::snapshot:
      if (!options_.has_recurrent) return errc::invalid_argument;
      if (e.exact == exactness::prefill_exact && e.position % options_.alignment != 0) return errc::misaligned;
      return errc{};
    }
    return errc::invalid_argument;
  }

  bool holds_block(const detail::engine_index& index, const content_key& key) const noexcept {
    return index.find(state_kind::kv_block, key, exactness::prefill_exact) != nullptr ||
           (options_.accept_decode_continuation &&
            index.find(state_kind::kv_block, key, exactness::decode_continuation) != nullptr);
  }

  /// Fills usable_ and matched_ for `prompt`.
  void score(std::span<const token_id> prompt, const extra_keys& extra) noexcept {
    std::fill(usable_.begin(), usable_.end(), 0);
    std::fill(matched_.begin(), matched_.end(), 0);
    const std::uint64_t limit =
        prompt.empty() ? 0 : std::min<std::uint64_t>(prompt.size() - 1, options_.max_prompt_tokens);
    if (limit == 0) return;
    const std::uint32_t block = options_.block_size;
    chain_[0] = keys_->root(extra);
    if (chain_[0] == content_key{}) return;

    // The walk: engines that hold every block so far; matched_ counts their blocks until they drop out.
    std::iota(walking_.begin(), walking_.end(), engine_id{0});
    std::size_t walking = walking_.size();
    const std::uint64_t blocks = limit / block;
    for (std::uint64_t i = 0; i < blocks && walking != 0; ++i) {
      const media_digest media = media_digest_of(extra.media, i * block, (i + 1) * block);
      const content_key key = keys_->chain(chain_[i], prompt.subspan(i * block, block), media);
      if (key == content_key{}) break;
      chain_[i + 1] = key;
      std::size_t kept = 0;
      for (std::size_t w = 0; w < walking; ++w) {
        const engine_id e = walking_[w];
        if (!holds_block(*indexes_[e], key)) continue;
        matched_[e] = i + 1;
        walking_[kept++] = e;
      }
      walking = kept;
    }

    if (!options_.has_recurrent) {
      for (std::uint32_t e = 0; e < options_.engines; ++e) usable_[e] = matched_[e] * block;
    } else {
      confirmed_.clear();
      for (std::uint32_t e = 0; e < options_.engines; ++e) usable_[e] = deepest_snapshot(e, prompt, extra.media, limit);
    }
    for (std::uint32_t e = 0; e < options_.engines; ++e) matched_[e] *= block;
  }

  /// The deepest position <= limit at which engine e holds a snapshot of the prompt and every block before
  /// it, 0 if none. matched_[e] is still its block count. Snapshots at positions in [jB, (j+1)B) have parent
  /// key_{j-1} = chain_[j] and need blocks 0 .. j-1: boundaries j = matched_[e] .. 0, the deepest first.
  std::uint64_t deepest_snapshot(engine_id e, std::span<const token_id> prompt, std::span<const media_item> media,
                                 std::uint64_t limit) noexcept {
    const detail::engine_index& index = *indexes_[e];
    const std::uint64_t block = options_.block_size;
    for (std::uint64_t j = matched_[e] + 1; j-- > 0;) {
      const std::uint64_t first = std::max<std::uint64_t>(j * block, 1);
      const std::uint64_t last = std::min(j * block + block - 1, limit);
      std::uint64_t best = 0;
      index.for_each_snapshot_under(chain_[j], [&](const detail::state_entry& s) {
        if (s.position < first || s.position > last || s.position <= best || !accepts(s.exact)) return;
        const content_key key = snapshot_of(j, s.position, s.exact, prompt, media);
        if (key != content_key{} && index.find(state_kind::snapshot, key, s.exact) != nullptr) best = s.position;
      });
      if (best != 0) return best;
    }
    return 0;
  }

  /// The prompt's snapshot key at `position` (in block j) of class `exact`, computed once per route.
  content_key snapshot_of(std::uint64_t j, std::uint64_t position, exactness exact, std::span<const token_id> prompt,
                          std::span<const media_item> media) noexcept {
    for (const confirmed_snapshot& c : confirmed_)
      if (c.position == position && c.exact == exact) return c.key;
    const std::uint64_t start = j * options_.block_size;
    const content_key key = keys_->snapshot(chain_[j], prompt.subspan(start, position - start), position, exact,
                                            media_digest_of(media, start, position));
    if (confirmed_.size() < confirmed_.capacity()) confirmed_.push_back({position, exact, key});
    return key;
  }

  route_choice choose(std::span<const double> loads, double total) const noexcept {
    const double cap = (total + 1) / options_.engines * (1 + options_.load_slack);
    const auto before = [&](engine_id a, engine_id b) {
      if (usable_[a] != usable_[b]) return usable_[a] > usable_[b];
      if (loads[a] != loads[b]) return loads[a] < loads[b];
      return a < b;
    };
    engine_id best = 0;
    engine_id least_loaded = 0;
    engine_id chosen = max_engines; // none yet
    for (engine_id e = 0; e < options_.engines; ++e) {
      if (before(e, best)) best = e;
      if (loads[e] < loads[least_loaded]) least_loaded = e;
      if (loads[e] <= cap && (chosen == max_engines || before(e, chosen))) chosen = e;
    }
    // In exact arithmetic the least loaded engine is under the cap; rounding of a huge sum may say otherwise.
    if (chosen == max_engines) chosen = least_loaded;
    return {chosen, usable_[chosen], best, usable_[best], chosen != best};
  }

  router_options options_;
  const Keys* keys_;
  std::vector<std::unique_ptr<detail::engine_index>> indexes_;
  // route's scratch, sized by make.
  std::vector<content_key> chain_; ///< key_{-1}, key_0, ... of the prompt: chain_[i + 1] = key_i
  std::vector<std::uint64_t> usable_;
  std::vector<std::uint64_t> matched_;
  std::vector<engine_id> walking_;
  std::vector<confirmed_snapshot> confirmed_;
};

} // namespace reprise::routing
