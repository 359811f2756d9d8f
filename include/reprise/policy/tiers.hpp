// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Memory tiers below the GPU, chosen at compile time like the cache policies:
///
/// \code
/// using cache = reprise::prefix_cache<reprise::dynamic_model, reprise::policy::chat, reprise::xxh3_hasher,
///                                     reprise::policy::tiers<reprise::policy::host_tier>>;
/// \endcode
///
/// `tiers<>` (the default) keeps everything in GPU memory: what the GPU pools evict is gone. With
/// `host_tier`, a KV block or snapshot evicted from the GPU pools is offloaded (write-back on eviction) into
/// pinned host memory the engine owns, and a later prompt that finds it there onboards it instead of
/// recomputing it. The cache plans every move; the engine moves the bytes (docs/tiers.md).

#include <concepts>
#include <type_traits>

namespace reprise::policy {

/// In-process host memory: `cache_options::host_kv_budget_bytes` and `host_snapshot_budget_bytes` of pinned
/// memory, one LRU per kind, offload when the GPU pool evicts (write-back), verified onboard on a hit.
struct host_tier {};

/// A store shared by a fleet of engine processes (Redis / Valkey through `reprise::redis`, or any store the
/// engine drives), below the host tier: what the host tier evicts is written there (write-back; or every
/// value once its step completed, with `cache_options::remote_write_through`), and
/// `prefetch` plans fetches of what a prompt would reuse into host units. Only writer-independent state
/// goes there: prefill-exact blocks and prefill-exact snapshots, which every process of the fleet computes
/// bit for bit alike (decode-filled blocks and turn ends stay in the engine that computed them). Names are
/// content keys from `cache_options::remote_keys` (docs/tiers.md). Needs `host_tier`.
struct remote_tier {};

/// The tiers below the GPU, fastest first. Each appears at most once.
template <class... Tier>
struct tiers {};

template <class T>
struct tier_traits; // only tiers<...> lists tiers

template <class... Tier>
struct tier_traits<tiers<Tier...>> {
  static constexpr bool host = (std::is_same_v<Tier, host_tier> || ...);
  static constexpr bool remote = (std::is_same_v<Tier, remote_tier> || ...);
  static_assert(((std::is_same_v<Tier, host_tier> ? 1 : 0) + ... + 0) <= 1, "policy::tiers<...>: host_tier twice");
  static_assert(((std::is_same_v<Tier, remote_tier> ? 1 : 0) + ... + 0) <= 1,
                "policy::tiers<...>: remote_tier twice");
  static_assert(((std::is_same_v<Tier, host_tier> || std::is_same_v<Tier, remote_tier>) && ...),
                "policy::tiers<...>: the tiers available are policy::host_tier and policy::remote_tier");
  static_assert(!remote || host,
                "policy::tiers<...>: remote_tier stages values through host memory: list host_tier too");
};

/// A tier list: `tiers<...>`.
template <class T>
concept tier_list = requires { { tier_traits<T>::host } -> std::convertible_to<bool>; };

} // namespace reprise::policy
