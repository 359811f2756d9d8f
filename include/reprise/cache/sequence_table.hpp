// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `sequence_table`: the live sequences, seq_id -> record, in a Boost.Intrusive `unordered_set` over a fixed
/// pool of records. A record's vectors keep their capacity when the record is reused, so after warm-up
/// admitting a sequence allocates nothing.

#include <reprise/cache/types.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/media_keys.hpp>

#include <boost/intrusive/unordered_set.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace reprise::detail {

struct sequence_record {
  boost::intrusive::unordered_set_member_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>> link;
  seq_id id = 0;
  std::vector<block_id> blocks;          ///< the block table
  std::vector<capture_point> captures;   ///< planned captures not yet resolved by commit, by position
  std::vector<std::uint8_t> written;     ///< commit's scratch: written[i] marks captures[i] as listed
  block_key root{};                      ///< key_{-1} of the chain
  stored_extra_keys extras{};
  /// The prompt's media items (sorted, all before the prompt's end): a tail probe digests those among its
  /// first tokens (`media_in`), and the prompt's blocks take their digests from `block_media`.
  std::vector<stored_media_item> media;
  /// (block index, media digest) of every block of the prompt holding an item, by index.
  std::vector<std::pair<std::uint32_t, media_digest>> block_media;
  std::uint32_t tokens = 0;              ///< tokens known (prompt + extended)
  std::uint32_t computed = 0;            ///< tokens committed as computed
  /// The cached chain of the sequence's prefix: chain[i] is the cached block holding tokens of block i, for
  /// i < chain.size(). It is blocks[i] except where the sequence computed a block that an equal one had
  /// already been published for (two equal prompts in flight); then the sequence also holds a reference on
  /// the published one, so its chain stays whole and later blocks publish under it.
  std::vector<block_id> chain;
  slot_id restore_slot = no_slot;        ///< a GPU snapshot slot held until the first commit (restore run)
  block_id copy_src = no_block;          ///< a kept partial block held until the first commit (copied)
  /// The turn-end snapshot this sequence restored from and the block it sits on: superseded once this
  /// sequence's own turn end is captured further along the same path. (What a sequence holds in a tier
  /// below the GPU is that tier's side table, indexed like this table: host_tier.hpp, remote_tier.hpp.)
  slot_id turn_restore = no_slot;
  block_id turn_restore_block = no_block;
  /// Tokens before this position were computed prefill-exactly (from the zero state or prefill-exact state,
  /// through prefill-exact KV); the KV of later positions, and states past it, are `decode_continuation`.
  std::uint32_t exact_until = 0;
  std::uint32_t prompt = 0;              ///< the admitted prompt's length: later captures are checkpoints
  /// This admission's computation, drawn once and never reused (0: none left to draw): the decode_continuation
  /// blocks it publishes carry it (`block_probe::origin`), so they never merge with equal tokens another
  /// computation wrote, and the chain a snapshot of this sequence ends on is this computation's own KV.
  std::uint64_t origin = 0;
  /// The decode checkpoints this sequence published (slot, block), oldest first.
  std::vector<std::pair<slot_id, block_id>> checkpoints;

  /// Copies the prompt's media items and digests them per block. Precondition: `check_media` accepted them.
  /// Throws `std::bad_alloc` (only on a record's first use with that many items).
  void set_media(std::span<const media_item> items, std::uint32_t block_size) {
    media.clear();
    block_media.clear();
    for (const media_item& x : items) media.push_back(stored_media_item::from(x));
    const std::span<const stored_media_item> all(media);
    for (std::size_t i = 0; i < media.size();) {
      const std::uint32_t block = media[i].position / block_size;
      const std::uint64_t begin = std::uint64_t{block} * block_size;
      block_media.emplace_back(block, media_digest_of(all, begin, begin + block_size));
      while (i < media.size() && media[i].position / block_size == block) ++i;
    }
  }
  /// The media digest of block `i` of the prompt, null without media (as `block_probe::media`).
  /// Complexity: O(log blocks with media); O(1) for a text prompt.
  const media_digest* media_of_block(std::uint32_t i) const noexcept {
    if (block_media.empty()) return nullptr;
    const auto it = std::lower_bound(block_media.begin(), block_media.end(), i,
                                     [](const auto& e, std::uint32_t j) { return e.first < j; });
    return it != block_media.end() && it->first == i ? &it->second : nullptr;
  }
  /// The media digest of the prompt's items in positions [begin, end) (a partial block's first tokens).
  media_digest media_in(std::uint64_t begin, std::uint64_t end) const noexcept {
    if (media.empty()) return {};
    return media_digest_of(std::span<const stored_media_item>(media), begin, end);
  }

  exactness kv_kind(std::uint64_t end) const noexcept {
    return end <= exact_until ? exactness::prefill_exact : exactness::decode_continuation;
  }

  void reset(seq_id s) noexcept {
    id = s;
    blocks.clear();
    chain.clear();
    captures.clear();
    written.clear();
    root = {};
    extras = {};
    media.clear();
    block_media.clear();
    tokens = computed = 0;
    restore_slot = no_slot;
    copy_src = no_block;
    turn_restore = no_slot;
    turn_restore_block = no_block;
    exact_until = 0;
    prompt = 0;
    origin = 0;
    checkpoints.clear();
  }
};

class sequence_table {
  struct id_hash {
    std::size_t operator()(const sequence_record& r) const noexcept { return mix(r.id); }
    std::size_t operator()(seq_id s) const noexcept { return mix(s); }
    static std::size_t mix(seq_id s) noexcept { // splitmix64 finalizer: engines often use dense ids
      s = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ULL;
      s = (s ^ (s >> 27)) * 0x94d049bb133111ebULL;
      return static_cast<std::size_t>(s ^ (s >> 31));
    }
  };
  struct id_equal {
    bool operator()(const sequence_record& a, const sequence_record& b) const noexcept { return a.id == b.id; }
    bool operator()(seq_id s, const sequence_record& r) const noexcept { return s == r.id; }
    bool operator()(const sequence_record& r, seq_id s) const noexcept { return s == r.id; }
  };
  using set_type = boost::intrusive::unordered_set<
      sequence_record,
      boost::intrusive::member_hook<sequence_record, decltype(sequence_record::link), &sequence_record::link>,
      boost::intrusive::hash<id_hash>, boost::intrusive::equal<id_equal>, boost::intrusive::power_2_buckets<true>,
      boost::intrusive::constant_time_size<true>>;

public:
  explicit sequence_table(std::uint32_t capacity)
      : records_(capacity), buckets_(std::bit_ceil(std::max<std::size_t>(capacity, 2))),
        set_(typename set_type::bucket_traits(buckets_.data(), buckets_.size())), released_(capacity) {
    free_.reserve(capacity);
    for (std::uint32_t i = capacity; i-- > 0;) free_.push_back(i);
  }
  sequence_table(const sequence_table&) = delete;
  sequence_table& operator=(const sequence_table&) = delete;
  ~sequence_table() { set_.clear(); }

  sequence_record* find(seq_id s) noexcept {
    auto it = set_.find(s, id_hash{}, id_equal{});
    return it == set_.end() ? nullptr : &*it;
  }
  const sequence_record* find(seq_id s) const noexcept {
    auto it = set_.find(s, id_hash{}, id_equal{});
    return it == set_.end() ? nullptr : &*it;
  }
  bool full() const noexcept { return free_.empty(); }

  /// A reset record for `s`, not yet live (its contents may be filled before `insert`). Precondition: !full().
  sequence_record& prepare(seq_id s) noexcept {
    sequence_record& r = records_[free_.back()];
    r.reset(s);
    return r;
  }
  /// Makes the record returned by the last `prepare` live.
  void insert(sequence_record& r) noexcept {
    free_.pop_back();
    set_.insert(r);
  }
  /// Ends a live record; remembers the id so a second release reports `double_release`.
  void erase(sequence_record& r) noexcept {
    set_.erase(set_.iterator_to(r));
    free_.push_back(static_cast<std::uint32_t>(&r - records_.data()));
    if (!released_.empty()) {
      released_[released_next_] = r.id;
      released_next_ = (released_next_ + 1) % released_.size();
      if (released_count_ < released_.size()) ++released_count_;
    }
  }
  /// Whether `s` was released recently (the last `capacity` releases). Only used to choose an error code.
  /// Every id is a valid entry (the ring counts its filled entries), 2^64 - 1 included.
  bool recently_released(seq_id s) const noexcept {
    const auto filled = released_.begin() + static_cast<std::ptrdiff_t>(released_count_);
    return std::find(released_.begin(), filled, s) != filled;
  }

  /// The record's index in [0, capacity()): stable while it is live, so side tables can be indexed by it.
  std::uint32_t index_of(const sequence_record& r) const noexcept {
    return static_cast<std::uint32_t>(&r - records_.data());
  }
  std::uint32_t capacity() const noexcept { return static_cast<std::uint32_t>(records_.size()); }

  std::size_t size() const noexcept { return set_.size(); }
  auto begin() const noexcept { return set_.begin(); }
  auto end() const noexcept { return set_.end(); }

private:
  std::vector<sequence_record> records_;
  std::vector<typename set_type::bucket_type> buckets_;
  set_type set_;
  std::vector<std::uint32_t> free_;
  std::vector<seq_id> released_;
  std::size_t released_next_ = 0;
  std::size_t released_count_ = 0;
};

} // namespace reprise::detail
