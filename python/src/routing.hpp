// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// What `PrefixCache` (src/cache.cpp) and the fleet router's classes (src/routing.cpp) share: a state event as
/// Python holds it (`StateEvent`) and the key source a cache reports its events under (`FleetKeys`).

#include "bindings.hpp"

#include <reprise/keys/state_keys.hpp>
#include <reprise/state/model_config.hpp>
#if REPRISE_PYTHON_HAS_CONTENT_KEYS
#include <reprise/routing/fleet_keys.hpp>
#endif

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace reprise::python {

/// `StateEvent`: one event, a copy of what the cache reported (or built by hand), and the key source it was
/// reported under. Copies travel: the object stays valid after the cache's next `take_state_events`.
struct py_state_event {
  state_event event;
  /// `FleetKeys.source` of the keys the event was computed with; 0 for an event built by hand (a router then
  /// takes its key on trust).
  std::uint64_t source = 0;
};

/// `FleetKeys`: the content keys of one model and fleet (routing::fleet_keys), which caches report their state
/// under and routers hash prompts with. Caches and routers keep the Python object alive and point into it
/// (`ref`): Python objects never move. A module built without OpenSSL refuses to make one.
class py_fleet_keys {
public:
  /// Raises UnsupportedConfig without OpenSSL, or when it cannot compute SHA-256.
  py_fleet_keys(const model_config& m, std::uint64_t fleet_seed, std::string revision);

  state_keys_ref ref() const noexcept;
  /// Raises InvalidArgument, the message starting with `where`, unless these keys name the state of model `m`
  /// (its layout and block size, under this revision).
  void check_model(const model_config& m, std::string_view where) const;

  /// This key source's identity: 64 bits of its root key without extra keys (a digest of the seed and the
  /// fingerprint); never 0.
  std::uint64_t source() const noexcept { return source_; }
  std::uint64_t fleet_seed() const noexcept { return fleet_seed_; }
  const std::string& revision() const noexcept { return revision_; }
  std::uint32_t block_size() const noexcept { return block_size_; }
  nb::bytes fingerprint() const;

private:
  std::uint64_t fleet_seed_;
  std::string revision_;
  std::uint32_t block_size_;
  std::uint64_t source_ = 0;
#if REPRISE_PYTHON_HAS_CONTENT_KEYS
  model_fingerprint fingerprint_{};
  std::optional<routing::fleet_keys> keys_;
#endif
};

} // namespace reprise::python
