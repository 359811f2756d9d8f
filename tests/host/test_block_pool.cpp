// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// block_pool, epoch_fifo and block_index.
#include <reprise/cache/block_index.hpp>
#include <reprise/cache/block_pool.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

using namespace reprise;
using namespace reprise::detail;

TEST_CASE("a new pool holds every block free and reusable") {
  block_pool pool(8, 16);
  CHECK(pool.size() == 8);
  CHECK(pool.free().size() == 8);
  CHECK(pool.available() == 8);
  CHECK(pool.tokens(3).size() == 16);
  CHECK(pool.id_of(pool.node(5)) == 5);
}

TEST_CASE("epoch_fifo: nodes given up in step n are reusable only after step n completes") {
  block_pool pool(4, 16);
  auto& free = pool.free();
  // take all four
  std::vector<block_node*> taken;
  while (block_node* n = free.front_safe()) {
    free.erase(*n, 0);
    taken.push_back(n);
  }
  CHECK(taken.size() == 4);
  CHECK(free.safe_count() == 0);
  // step 0 (safe_before = 0): give two back, tagged 1
  free.push_back(*taken[0], 1, 0);
  free.push_back(*taken[1], 1, 0);
  CHECK(free.size() == 2);
  CHECK(free.front_safe() == nullptr);
  // step 1: one more, tagged 2
  free.push_back(*taken[2], 2, 0);
  // step 0 completes -> safe_before = 1
  free.advance(1);
  CHECK(free.safe_count() == 2);
  CHECK(free.front_safe() == taken[0]);
  // erase the unsafe node in the middle of the cursor logic, then the safe head
  free.erase(*taken[2], 1);
  CHECK(free.safe_count() == 2);
  free.erase(*taken[0], 1);
  CHECK(free.safe_count() == 1);
  free.push_front_safe(*taken[3]);
  CHECK(free.safe_count() == 2);
  CHECK(free.front_safe() == taken[3]);
  free.push_back(*taken[2], 3, 1);
  free.advance(2);
  CHECK(free.safe_count() == 2);
  free.advance(3);
  CHECK(free.safe_count() == 3);
}

TEST_CASE("block_index: a match needs equal key, parent, tokens and (for a root) extra keys") {
  block_pool pool(4, 4);
  block_index index(pool);
  const token_id t1[4] = {1, 2, 3, 4};
  const token_id t2[4] = {1, 2, 3, 5};
  const stored_extra_keys tenant_a = stored_extra_keys::from({.tenant_salt = 1});
  const stored_extra_keys tenant_b = stored_extra_keys::from({.tenant_salt = 2});
  const block_key same{9, 9}; // every probe below has this key: only verification separates them

  block_node& root = pool.node(0);
  std::copy(t1, t1 + 4, pool.tokens(0).begin());
  pool.root_extras(0) = tenant_a;
  root.key = same;
  block_index::insert_commit_data data;
  REQUIRE(index.insert_check({same, no_block, t1, &tenant_a}, data) == nullptr);
  index.insert_commit(root, data);

  CHECK(index.find({same, no_block, t1, &tenant_a}) == &root);
  CHECK(index.find({same, no_block, t2, &tenant_a}) == nullptr); // other tokens
  CHECK(index.find({same, no_block, t1, &tenant_b}) == nullptr); // other tenant
  CHECK(index.find({same, 3, t1, &tenant_a}) == nullptr);        // other parent
  CHECK(index.find({{9, 8}, no_block, t1, &tenant_a}) == nullptr); // other key
  CHECK(index.insert_check({same, no_block, t1, &tenant_a}, data) == &root);

  block_node& child = pool.node(1);
  std::copy(t2, t2 + 4, pool.tokens(1).begin());
  child.key = same;
  child.parent = 0;
  REQUIRE(index.insert_check({same, 0, t2, nullptr}, data) == nullptr);
  index.insert_commit(child, data);
  CHECK(index.size() == 2);
  CHECK(index.find({same, 0, t2, nullptr}) == &child);
  CHECK(index.find({same, 0, t1, nullptr}) == nullptr);
  index.erase(child);
  CHECK(index.find({same, 0, t2, nullptr}) == nullptr);
  CHECK(index.size() == 1);
}
