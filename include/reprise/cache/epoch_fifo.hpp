// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `epoch_fifo`: an intrusive FIFO of nodes tagged with the step after which they may be reused.
///
/// GPU work runs after the scheduler decided: a block or slot given up while step n is being scheduled may
/// still be read by step n's kernels, so it is reusable only once the engine reports step n complete
/// (docs/architecture.md, invariant 6). Nodes enter with tag n + 1 and become *safe* once
/// `safe_before >= tag`. Tags are non-decreasing along the list, so the safe nodes are a prefix; a cursor
/// marks where it ends and the count of safe nodes is exact in O(1), which lets callers check capacity before
/// changing anything.

#include <reprise/cache/types.hpp>

#include <boost/intrusive/list.hpp>

#include <cstddef>

namespace reprise::detail {

using list_hook = boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>>;

/// `Node` has a `list_hook` member `Hook` and an `epoch_t` member `Tag`.
template <class Node, list_hook Node::*Hook, epoch_t Node::*Tag>
class epoch_fifo {
  using list_type = boost::intrusive::list<Node, boost::intrusive::member_hook<Node, list_hook, Hook>,
                                           boost::intrusive::constant_time_size<true>>;

public:
  epoch_fifo() : cursor_(list_.end()) {}
  epoch_fifo(const epoch_fifo&) = delete;
  epoch_fifo& operator=(const epoch_fifo&) = delete;
  ~epoch_fifo() { list_.clear(); }

  /// Appends `n` with tag `tag`. Precondition: `tag` >= the tag of the last node.
  /// Complexity: O(1).
  void push_back(Node& n, epoch_t tag, epoch_t safe_before) noexcept {
    n.*Tag = tag;
    list_.push_back(n);
    if (cursor_ == list_.end()) {
      if (tag <= safe_before) ++safe_;
      else cursor_ = list_.iterator_to(n);
    }
  }

  /// Prepends `n` as immediately reusable (tag 0).
  void push_front_safe(Node& n) noexcept {
    n.*Tag = 0;
    list_.push_front(n);
    ++safe_;
  }

  /// Unlinks `n`, which must be in this list. Complexity: O(1).
  void erase(Node& n, epoch_t safe_before) noexcept {
    auto it = list_.iterator_to(n);
    if (n.*Tag <= safe_before) --safe_;
    else if (it == cursor_) ++cursor_;
    list_.erase(it);
  }

  /// The oldest node if it is safe to reuse, else null.
  Node* front_safe() noexcept { return safe_ != 0 ? &list_.front() : nullptr; }
  Node* front() noexcept { return list_.empty() ? nullptr : &list_.front(); }

  /// Moves the cursor past the nodes that became safe. Amortized O(1) per node over the list's life.
  void advance(epoch_t safe_before) noexcept {
    while (cursor_ != list_.end() && (*cursor_).*Tag <= safe_before) {
      ++cursor_;
      ++safe_;
    }
  }

  std::size_t size() const noexcept { return list_.size(); }
  std::size_t safe_count() const noexcept { return safe_; }
  bool contains(const Node& n) const noexcept { return (n.*Hook).is_linked(); }
  auto begin() const noexcept { return list_.begin(); }
  auto end() const noexcept { return list_.end(); }

private:
  list_type list_;
  typename list_type::iterator cursor_;
  std::size_t safe_ = 0;
};

} // namespace reprise::detail
