// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `in_step_sharing`: the full prompt blocks that sequences admitted while the current step is scheduled
/// will compute, offered to prompts admitted later in the same step (`cache_options::share_in_step`,
/// attention-only models under `policy::block_sharing`).
///
/// Engines like vLLM run a step's sequences in one forward pass in which every layer writes the KV of the
/// whole batch before its attention reads, so a prompt may read another one's blocks in the pass that
/// writes them instead of computing them again. A block a sequence (its *writer*) will compute is *pending*
/// from the writer's admission until the writer's *window* closes: at its first commit, its release, or the
/// end of the step, whichever comes first. A pending block is found like a published one (same key, parent
/// block, tokens, class and, for a chain's first block, extra keys) in an index of its own. The index uses
/// the node's index hook, free while a block is owned (neither the block index nor the tail index holds
/// owned blocks), so `block_node` keeps its size.
///
/// A pending block is *written* when its writer's window closes at a commit that covers it. A sequence
/// that shares pending blocks (a *sharer*) may commit once all of them are written. A window that closes
/// with a shared block unwritten *breaks* its sharers: their commit fails until they are released, so KV
/// computed from a block nobody wrote is never published, and their own pending blocks stop being offered.
///
/// Sharers are found without a per-block record. A chain's blocks are verified through their parents, so a
/// sequence holding a writer's block at depth d holds the writer's block at every depth from the writer's
/// first pending block to d: the sharers of a window's first unwritten block are the listed sequences that
/// hold it at its depth, and they include the sharers of every deeper block.

#include <reprise/cache/block_index.hpp>
#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/errc.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/media_keys.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace reprise::detail {

class in_step_sharing {
public:
  /// One sequence record's part, indexed like the sequence table's records.
  struct member {
    /// Table indices [own_from, own_to) of the blocks it registered as pending; empty once its window closed.
    std::uint32_t own_from = 0, own_to = 0;
    /// Table indices [shared_from, shared_to) of the blocks it shares that were pending when it was
    /// admitted; emptied once its commit found them written, or the step ended with them written.
    std::uint32_t shared_from = 0, shared_to = 0;
    bool broken = false; ///< a block it shares was left unwritten: its commit fails until it is released
    bool listed = false; ///< in this step's list (it registered or shared pending blocks in this step)

    bool clean() const noexcept { return *this == member{}; }
    friend bool operator==(const member&, const member&) = default;
  };

  /// Disabled: holds nothing and allocates nothing. Enabled: an index over `pool` and one member per
  /// sequence record. Throws `std::bad_alloc`.
  in_step_sharing(bool enabled, const block_pool& pool, std::uint32_t sequences) {
    if (!enabled) return;
    index_ = std::make_unique<block_index>(pool);
    members_.resize(sequences);
    listed_.reserve(sequences);
  }

  bool enabled() const noexcept { return index_ != nullptr; }
  std::size_t pending_blocks() const noexcept { return index_ ? index_->size() : 0; }
  /// Whether `n` is a pending block: owned and linked (only this index links owned nodes).
  static bool pending(const block_node& n) noexcept {
    return n.state == block_state::owned && n.index_link.is_linked();
  }
  const member& of(const sequence_table& table, const sequence_record& r) const noexcept {
    return members_[table.index_of(r)];
  }

  // ------------------------------------------------------------------------------------------------------
  // admit

  /// Continues the lookup of `r`, whose table holds the verified published blocks, into pending blocks:
  /// appends those that continue the chain, up to floor((L - 1) / B) blocks in all. Changes nothing else.
  /// Returns the blocks matched in all. Complexity: one hash and O(1) expected probes per block.
  template <std::uint32_t B, class Hasher>
  std::uint32_t lookup(sequence_record& r, std::span<const token_id> prompt, const block_ledger& blocks,
                       const Hasher& hasher) noexcept {
    auto i = static_cast<std::uint32_t>(r.blocks.size());
    const auto limit = static_cast<std::uint32_t>((prompt.size() - 1) / B);
    if (index_->size() == 0 || i >= limit) return i;
    block_id parent = i == 0 ? no_block : r.blocks[i - 1];
    block_key key = i == 0 ? r.root : blocks.node(parent).key;
    for (; i < limit; ++i) {
      const auto tokens = prompt.subspan(std::size_t{i} * B).template first<B>();
      const media_digest* media = r.media_of_block(i);
      key = chain_block(hasher, key, tokens, media);
      // Attention-only models compute every block prefill-exactly: no other class is ever pending.
      const block_node* hit = index_->find({key, parent, tokens, &r.extras, media, exactness::prefill_exact});
      if (hit == nullptr) break;
      parent = blocks.id_of(*hit);
      r.blocks.push_back(parent);
    }
    return i;
  }

  /// After `apply` made `r` live with `matched` shared blocks, the first `published` of them published:
  /// keeps `r.chain` to the published ones (the others join it at `r`'s commit, once written), registers
  /// the full prompt blocks `r` computes as pending, and lists `r` when it shares or registers any.
  /// Complexity: one hash and O(1) expected per registered block.
  template <std::uint32_t B, class Hasher>
  void admitted(sequence_record& r, std::uint32_t published, std::uint32_t matched, block_ledger& blocks,
                const Hasher& hasher, const sequence_table& table, cache_metrics& metrics) noexcept {
    r.chain.resize(published);
    member& me = at(table, r);
    me = member{};
    me.shared_from = published;
    me.shared_to = matched;
    const std::uint32_t full = r.tokens / B;
    std::uint32_t i = matched;
    if (i < full) {
      block_key key = i == 0 ? r.root : blocks.node(r.blocks[i - 1]).key;
      for (; i < full; ++i) {
        const block_id b = r.blocks[i];
        const block_id parent = i == 0 ? no_block : r.blocks[i - 1];
        const auto tokens = blocks.pool().template tokens_of<B>(b);
        const media_digest* media = blocks.pool().media_or_null(b); // set by `apply` from the prompt
        key = chain_block(hasher, key, tokens, media);
        const block_probe probe{key, parent, tokens, &r.extras, media, r.kv_kind(std::uint64_t{i + 1} * B)};
        block_index::insert_commit_data data;
        // An equal block is pending already (a prompt that ends on a block boundary computes its last
        // block although it could share it): later prompts find that one, and none can reach this block
        // or the ones under it.
        if (index_->insert_check(probe, data) != nullptr) break;
        block_node& n = blocks.node(b);
        n.key = key;
        n.parent = parent;
        n.depth = i;
        n.kind = probe.kind;
        if (parent == no_block) blocks.pool().root_extras(b) = r.extras;
        index_->insert_commit(n, data);
      }
    }
    me.own_from = matched;
    me.own_to = i;
    metrics.blocks_shared_in_step += matched - published;
    if (me.own_from != me.own_to || me.shared_from != me.shared_to) {
      me.listed = true;
      listed_.push_back(&r);
    }
  }

  // ------------------------------------------------------------------------------------------------------
  // commit, release, end of the step

  /// `unwritten_blocks` while a block `r` shares is pending (its writer has not committed) or when one was
  /// left unwritten (`r` is broken), else success. Changes nothing. Complexity: O(shared blocks).
  errc check_commit(const sequence_record& r, const block_ledger& blocks, const sequence_table& table) const noexcept {
    const member& me = of(table, r);
    if (me.broken) return errc::unwritten_blocks;
    for (std::uint32_t i = me.shared_from; i < me.shared_to; ++i)
      if (pending(blocks.node(r.blocks[i]))) return errc::unwritten_blocks;
    return errc{};
  }

  /// `r` committed its first `n` tokens, `check_commit` having passed: the blocks it shares are written,
  /// and its window closes with the blocks that `n` covers written. Call before publishing `r`'s blocks: a
  /// pending block must leave this index before it enters the block index (they share the hook).
  void committed(sequence_record& r, std::uint32_t n, std::uint32_t block_size, block_ledger& blocks,
                 const sequence_table& table) noexcept {
    member& me = at(table, r);
    me.shared_from = me.shared_to = 0;
    close(r, n / block_size, blocks, table);
  }

  /// `r` is being released (or finished): its window closes with nothing written. Call while `r` still
  /// holds its blocks. Complexity: O(its pending blocks + listed sequences).
  void ended(sequence_record& r, block_ledger& blocks, const sequence_table& table) noexcept {
    member& me = at(table, r);
    if (me.listed) {
      close(r, me.own_from, blocks, table);
      const auto it = std::find(listed_.begin(), listed_.end(), &r);
      *it = listed_.back();
      listed_.pop_back();
    }
    me = member{};
  }

  /// The step being scheduled ended: every open window closes with nothing more written, and the list
  /// empties (what sharers share is now written, or they are broken). Complexity: O(pending blocks +
  /// listed sequences^2) at worst, O(listed sequences) when nothing was left unwritten.
  void step_completed(block_ledger& blocks, const sequence_table& table) noexcept {
    for (sequence_record* r : listed_) close(*r, at(table, *r).own_from, blocks, table);
    for (sequence_record* r : listed_) {
      member& me = at(table, *r);
      me.shared_from = me.shared_to = 0;
      me.listed = false;
    }
    listed_.clear();
  }

  // ------------------------------------------------------------------------------------------------------
  // check_invariants

  /// Recomputes the sharing's state: each open window's blocks are pending, in table order, under their
  /// writer's chain (keys recomputed with `hasher`); the index holds exactly them (`owned_linked`: owned
  /// blocks the caller found linked); members of records not live are clean; the list holds exactly the
  /// listed members, each live once. Complexity: O(pending blocks + sequence records).
  template <class Hasher>
  bool check(const block_ledger& blocks, const sequence_table& table, const Hasher& hasher,
             std::uint32_t block_size, std::size_t owned_linked) const {
    if (!enabled()) return owned_linked == 0;
    if (index_->size() != owned_linked) return false;
    std::size_t in_windows = 0, dirty_live = 0, listed_live = 0;
    for (const sequence_record& r : table) {
      const member& me = of(table, r);
      dirty_live += !me.clean();
      listed_live += me.listed;
      const bool open = me.own_from != me.own_to, sharing = me.shared_from != me.shared_to;
      if (me.own_from > me.own_to || me.shared_from > me.shared_to) return false;
      if (me.own_to > r.tokens / block_size || me.shared_to > r.blocks.size()) return false;
      if (me.broken && (open || sharing)) return false;
      if ((open || sharing) && !me.listed) return false;
      // The shared blocks join the chain only at the sharer's commit, once written.
      if (sharing && (r.chain.size() != me.shared_from || (open && me.shared_to > me.own_from))) return false;
      if (!open) continue;
      if (r.chain.size() > me.own_from) return false;
      for (std::uint32_t i = me.own_from; i < me.own_to; ++i) {
        const block_id b = r.blocks[i];
        const block_node& n = blocks.node(b);
        const block_id parent = i == 0 ? no_block : r.blocks[i - 1];
        if (!pending(n) || n.depth != i || n.parent != parent) return false;
        if (n.key != chain_block(hasher, i == 0 ? r.root : blocks.node(parent).key, blocks.pool().tokens(b),
                                 blocks.pool().media_or_null(b)))
          return false;
        if (parent == no_block && !(blocks.pool().root_extras(b) == r.extras)) return false;
        ++in_windows;
      }
    }
    // Window blocks are distinct (each is its writer's own), so equal counts mean the index holds them all.
    if (in_windows != index_->size()) return false;
    std::size_t dirty = 0, listed = 0;
    for (const member& me : members_) {
      dirty += !me.clean();
      listed += me.listed;
    }
    if (dirty != dirty_live || listed != listed_live || listed != listed_.size()) return false;
    std::vector<std::uint8_t> seen(members_.size(), 0);
    for (const sequence_record* r : listed_) {
      if (table.find(r->id) != r || !of(table, *r).listed) return false;
      if (seen[table.index_of(*r)]++ != 0) return false;
    }
    return true;
  }

private:
  member& at(const sequence_table& table, const sequence_record& r) noexcept { return members_[table.index_of(r)]; }

  /// Closes `w`'s window with its blocks at table indices below `covered` written: all leave the index, and
  /// the sequences that share its first unwritten block, if any, are broken (which closes their windows
  /// with nothing written). Complexity: O(its pending blocks + listed sequences) per window closed.
  void close(sequence_record& w, std::uint32_t covered, block_ledger& blocks, const sequence_table& table) noexcept {
    member& me = at(table, w);
    const std::uint32_t from = me.own_from, to = me.own_to;
    if (from == to) return;
    me.own_to = from;
    for (std::uint32_t i = from; i < to; ++i) {
      block_node& n = blocks.node(w.blocks[i]);
      index_->erase(n);
      // An owned block has no identity until it is published (which sets these again).
      n.key = {};
      n.parent = no_block;
      n.depth = 0;
    }
    const std::uint32_t unwritten = std::clamp(covered, from, to);
    if (unwritten == to) return;
    const block_id lost = w.blocks[unwritten];
    if (blocks.node(lost).refcount == 1) return; // held by its writer alone: no sharer
    for (sequence_record* s : listed_) {
      member& other = at(table, *s);
      if (s == &w || other.broken || unwritten < other.shared_from || unwritten >= other.shared_to ||
          s->blocks[unwritten] != lost)
        continue;
      other.broken = true;
      other.shared_from = other.shared_to = 0;
      close(*s, other.own_from, blocks, table);
    }
  }

  std::unique_ptr<block_index> index_;
  std::vector<member> members_;
  std::vector<sequence_record*> listed_; ///< this step's members with a window or shared blocks, any order
};

} // namespace reprise::detail
