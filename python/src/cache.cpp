// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
/// \file
/// `PrefixCache`: `reprise::runtime_prefix_cache<Policy>` behind one Python class. The policy is a
/// compile-time parameter in C++, so the module instantiates the named policies of <reprise/catalog.hpp> (the
/// names reprise-sim offers too) and the constructor picks one by name. Every call forwards to the C++ cache;
/// an errc becomes the matching exception and, as in C++, leaves the cache unchanged. Plans copy their block
/// tables and capture lists into numpy arrays they own, so a plan stays valid after later calls.
///
/// The host tier (`policy::tiers<policy::host_tier>`) is a compile-time parameter too: every named policy that
/// can have one (`catalog::policy_entry::takes_host_tier`) is also instantiated with it, and a non-zero host
/// budget picks that instantiation; and with the remote tier below it (`policy::tiers<policy::host_tier,
/// policy::remote_tier>`), picked by a fleet seed. A configuration the C++ cache refuses raises the rule's own
/// message (`reprise::describe(config_rule)`, config_rules.hpp). The
/// content keys of the remote tier need OpenSSL (`reprise::sha256`); a module built without it refuses them.

#include "bindings.hpp"
#include "routing.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/catalog.hpp>
#include <reprise/policy/tiers.hpp>
#if REPRISE_PYTHON_HAS_CONTENT_KEYS
#include <reprise/keys/content_key.hpp>
#endif

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace reprise::python {
namespace {

namespace pol = reprise::policy;
using host_tiers = pol::tiers<pol::host_tier>;
using remote_tiers = pol::tiers<pol::host_tier, pol::remote_tier>;

/// The type-erased cache: one virtual call per operation in front of the C++ façade.
class cache_base {
public:
  virtual ~cache_base() = default;
  virtual result<admit_plan> admit(seq_id s, std::span<const token_id> prompt, const extra_keys& keys,
                                   std::span<const std::uint32_t> capture_offsets) = 0;
  virtual result<void> commit(seq_id s, std::uint32_t n, std::span<const std::uint32_t> written) = 0;
  virtual result<extend_plan> extend(seq_id s, std::span<const token_id> tokens) = 0;
  virtual result<finish_plan> finish(seq_id s, finish_options o) = 0;
  virtual result<void> release(seq_id s) = 0;
  virtual result<fork_plan> fork(seq_id src, seq_id dst) = 0;
  virtual result<void> step_complete(epoch_t n) = 0;
  virtual epoch_t current_epoch() const = 0;
  virtual const cache_metrics& metrics() const = 0;
  virtual cache_geometry geometry() const = 0;
  virtual std::uint32_t snapshot_slots() const = 0;
  virtual std::uint32_t kv_blocks() const = 0;
  virtual std::uint64_t hasher_seed() const = 0;
  virtual std::span<const block_id> block_table(seq_id s) const = 0;
  virtual result<void> check_invariants() const = 0;
  virtual transfer_plan take_transfers() = 0;
  virtual std::uint32_t host_kv_units() const = 0;
  virtual std::uint32_t host_snapshot_units() const = 0;
  virtual result<probe_plan> probe(std::span<const token_id> prompt, const extra_keys& keys) = 0;
  virtual result<fetch_plan> prefetch(std::span<const token_id> prompt, const extra_keys& keys,
                                      const std::span<const content_key>* in_store) = 0;
  virtual result<void> fetched(remote_item item, std::uint32_t unit, std::span<const std::byte> header) = 0;
  virtual std::span<const state_event> take_state_events() = 0;
};

template <class Policy, class Tiers>
class cache_of final : public cache_base {
public:
  using cache_type = runtime_prefix_cache<Policy, xxh3_hasher, Tiers>;
  explicit cache_of(cache_type c) : c_(std::move(c)) {}

  result<admit_plan> admit(seq_id s, std::span<const token_id> p, const extra_keys& k,
                           std::span<const std::uint32_t> offsets) override {
    return c_.admit(s, p, k, offsets);
  }
  result<void> commit(seq_id s, std::uint32_t n, std::span<const std::uint32_t> w) override {
    return c_.commit(s, n, w);
  }
  result<extend_plan> extend(seq_id s, std::span<const token_id> t) override { return c_.extend(s, t); }
  result<finish_plan> finish(seq_id s, finish_options o) override { return c_.finish(s, o); }
  result<void> release(seq_id s) override { return c_.release(s); }
  result<fork_plan> fork(seq_id a, seq_id b) override { return c_.fork(a, b); }
  result<void> step_complete(epoch_t n) override { return c_.step_complete(n); }
  epoch_t current_epoch() const override { return c_.current_epoch(); }
  const cache_metrics& metrics() const override { return c_.metrics(); }
  cache_geometry geometry() const override { return c_.geometry(); }
  std::uint32_t snapshot_slots() const override { return c_.snapshot_slots(); }
  std::uint32_t kv_blocks() const override { return c_.kv_blocks(); }
  std::uint64_t hasher_seed() const override { return c_.hasher_seed(); }
  std::span<const block_id> block_table(seq_id s) const override { return c_.block_table(s); }
  result<void> check_invariants() const override { return c_.check_invariants(); }
  transfer_plan take_transfers() override { return c_.take_transfers(); }
  std::uint32_t host_kv_units() const override { return c_.host_kv_units(); }
  std::uint32_t host_snapshot_units() const override { return c_.host_snapshot_units(); }
  result<probe_plan> probe(std::span<const token_id> p, const extra_keys& k) override { return c_.probe(p, k); }
  result<fetch_plan> prefetch(std::span<const token_id> p, const extra_keys& k,
                              const std::span<const content_key>* in_store) override {
    return in_store ? c_.prefetch(p, k, *in_store) : c_.prefetch(p, k);
  }
  result<void> fetched(remote_item item, std::uint32_t unit, std::span<const std::byte> header) override {
    return c_.fetched(item, unit, header);
  }
  std::span<const state_event> take_state_events() override { return c_.take_state_events(); }

private:
  cache_type c_;
};

/// A cache of policy `Policy` with tiers `Tiers`, or the Python exception of the first configuration rule
/// `m` and `o` break, with the rule's message.
template <class Policy, class Tiers>
std::unique_ptr<cache_base> make_cache_of(const model_config& m, const cache_options& o) {
  using cache = runtime_prefix_cache<Policy, xxh3_hasher, Tiers>;
  if (const config_rule r = cache::check(m, o); r != config_rule::ok)
    raise_message(to_errc(r), "PrefixCache: " + describe(r));
  return std::make_unique<cache_of<Policy, Tiers>>(value_or_raise(cache::create(m, o), "PrefixCache"));
}

/// A cache of the named policy `id`: with the remote tier below a host tier (`remote`), with a host tier
/// (`host`), or with neither. Precondition: the policy takes a host tier when `host` is set.
std::unique_ptr<cache_base> make_cache(catalog::policy_id id, const model_config& m, const cache_options& o, bool host,
                                       bool remote) {
  return catalog::visit_policy(id, [&](auto policy) {
    using P = typename decltype(policy)::type;
    if constexpr (takes_host_tier<P>) {
      if (remote) return make_cache_of<P, remote_tiers>(m, o);
      if (host) return make_cache_of<P, host_tiers>(m, o);
    }
    return make_cache_of<P, pol::tiers<>>(m, o);
  });
}

/// Names this module accepted before its policies and presets came from the catalog shared with reprise-sim.
/// Deprecated: each still works, with a DeprecationWarning naming the catalog's name.
struct deprecated_name {
  std::string_view name;
  std::string_view now;
};
constexpr deprecated_name deprecated_policies[] = {{"snapshot_restore", "snapshot_turns"},
                                                   {"snapshot_prefill_exact", "strict"}};

/// "snapshot_restore (now snapshot_turns), ...".
std::string deprecated_policy_list() {
  std::string s;
  for (const deprecated_name& d : deprecated_policies)
    s.append(s.empty() ? "" : ", ").append(d.name).append(" (now ").append(d.now).append(")");
  return s;
}

// ----- plans: plain values holding owned numpy arrays -----

struct py_admit_plan {
  nb::object block_table;
  std::uint32_t shared_blocks, kv_matched_tokens, usable_tokens, tokens_lost_to_missing_snapshot;
  slot_id restore_slot;
  std::string restore_exactness;
  nb::object captures;
  block_id copy_src, copy_dst;
  bool restore_from_host;
  std::vector<capture_point> raw_captures; ///< for kernel_captures()
};

struct py_extend_plan {
  nb::object new_blocks;
  std::uint32_t first_new_block;
  nb::object captures;
  std::vector<capture_point> raw_captures; ///< for kernel_captures()
};

struct py_finish_plan {
  std::int64_t capture_position;
  slot_id capture_slot;
};

struct py_fork_plan {
  nb::object block_table;
  block_id copy_src, copy_dst;
  bool copy_recurrent_state;
};

/// A value for the fleet's store (remote tier), its key, header and a turn end's KV blocks copied out.
struct py_remote_put {
  std::string item;
  std::uint32_t unit;
  bool device;
  nb::bytes key, header;
  std::vector<std::uint32_t> kv_units;
};

struct py_transfers {
  nb::object kv_offload, snapshot_offload, kv_onboard;
  std::vector<py_remote_put> remote_puts;
};

/// A fetch `prefetch` planned, a turn end's host KV units copied out.
struct py_remote_fetch {
  std::string item;
  std::uint32_t unit;
  nb::bytes key;
  std::vector<std::uint32_t> kv_units;
};

struct py_fetch_plan {
  std::vector<py_remote_fetch> fetches;
  std::uint32_t blocks;
};

/// The Python name of each `remote_item`, indexed by its value.
constexpr std::array<std::string_view, 3> remote_item_names = {"block", "snapshot", "turn_end"};
static_assert(remote_item_names.size() == static_cast<std::size_t>(remote_item::turn_end) + 1,
              "a remote_item without a Python name");

std::string item_name(remote_item i) { return std::string(remote_item_names[static_cast<std::size_t>(i)]); }

remote_item item_of(const std::string& name) {
  for (std::size_t i = 0; i < remote_item_names.size(); ++i)
    if (name == remote_item_names[i]) return static_cast<remote_item>(i);
  throw nb::value_error(("unknown remote item '" + name + "' (block, snapshot or turn_end)").c_str());
}

/// ", kv_units=[3, 4, NO_UNIT]" for a turn end's units, nothing for a block or a snapshot.
std::string kv_units_repr(const std::vector<std::uint32_t>& units) {
  if (units.empty()) return {};
  std::string s = ", kv_units=[";
  for (std::size_t i = 0; i < units.size(); ++i)
    s.append(i == 0 ? "" : ", ").append(units[i] == no_unit ? "NO_UNIT" : std::to_string(units[i]));
  return s + "]";
}

/// int32 [n, 2] (src, dst) rows: the layout of `reprise.ops` pairs.
nb::object move_array(std::span<const unit_move> moves) {
  std::vector<std::int32_t> flat;
  flat.reserve(moves.size() * 2);
  for (const unit_move& m : moves) { // unit ids are below max_pool_ids = 2^31 - 1
    flat.push_back(static_cast<std::int32_t>(m.src));
    flat.push_back(static_cast<std::int32_t>(m.dst));
  }
  return owned_array<std::int32_t>(flat, 2);
}

/// Captures in the kernels' form (reprise.ops' `captures`): int64 [n, 3] rows of (sequence, position, slot), the
/// sequence being the engine's batch index of the sequence in the kernel call.
nb::object kernel_capture_array(std::span<const capture_point> caps, std::int64_t sequence) {
  if (sequence < 0 || sequence > std::numeric_limits<std::int32_t>::max())
    raise_message(errc::out_of_range, "kernel_captures: sequence " + std::to_string(sequence) +
                                          " is not a batch index (0 .. 2^31 - 1)");
  std::vector<std::int64_t> flat;
  flat.reserve(caps.size() * 3);
  for (const capture_point& c : caps) {
    flat.push_back(sequence);
    flat.push_back(c.position);
    flat.push_back(c.slot);
  }
  return owned_array<std::int64_t>(flat, 3);
}

nb::object capture_array(std::span<const capture_point> caps) {
  std::vector<std::int64_t> flat;
  flat.reserve(caps.size() * 2);
  for (const capture_point& c : caps) {
    flat.push_back(c.position);
    flat.push_back(c.slot);
  }
  return owned_array<std::int64_t>(flat, 2);
}

/// A snapshot policy on a model with recurrent layers needs a snapshot budget of at least one snapshot: the
/// default (none) and a budget below one snapshot raise BudgetTooSmall saying how much one snapshot takes.
void check_snapshot_budget(const model_config& m, const std::string& policy, bool restores,
                           std::optional<std::size_t> budget) {
  const bool keeps_snapshots = m.has_recurrent() && restores;
  if (!keeps_snapshots || (budget && *budget >= m.bytes_per_snapshot())) return;
  const std::size_t one = m.bytes_per_snapshot();
  const std::size_t tenths_of_mib = (one * 10 + (std::size_t{1} << 19)) >> 20;
  const std::string per = std::to_string(one) + " bytes (" + std::to_string(tenths_of_mib / 10) + "." +
                          std::to_string(tenths_of_mib % 10) + " MiB)";
  const config_rule rule = config_rule::snapshot_budget_below_one_snapshot;
  raise_message(to_errc(rule),
                "PrefixCache: " + std::string(to_string(rule)) + " (" + std::string(to_string(to_errc(rule))) +
                    "): policy '" + policy + "' keeps snapshots of this model's recurrent layers, " +
                    (budget ? "and snapshot_budget_bytes=" + std::to_string(*budget) + " holds none"
                            : std::string("so snapshot_budget_bytes is required")) +
                    ": one snapshot is " + per + "; give about one slot per live conversation plus one per shared "
                    "prefix, e.g. snapshot_budget_bytes=64 * config.bytes_per_snapshot for 64 slots (or "
                    "policy='memory_only' to share KV blocks without snapshots)");
}

/// `snapshot_eviction=`: the names of policy::snapshot_eviction a caller may choose.
policy::snapshot_eviction eviction_of(const std::string& name) {
  if (name == "lru") return policy::snapshot_eviction::lru;
  if (name == "cost_aware") return policy::snapshot_eviction::cost_aware;
  throw nb::value_error(("PrefixCache: unknown snapshot_eviction '" + name + "' ('lru' or 'cost_aware')").c_str());
}

class py_cache {
public:
  py_cache(const model_config& m, const std::string& policy, std::uint32_t kv_blocks, std::uint32_t max_sequences,
           std::optional<std::size_t> snapshot_budget_bytes, std::uint64_t snapshot_ttl_steps, std::uint32_t max_snapshots_per_path,
           std::uint32_t capture_interval, std::optional<std::uint64_t> hasher_seed, bool share_in_step,
           std::uint32_t decode_checkpoint_interval, std::uint32_t decode_checkpoints_per_sequence,
           std::size_t host_kv_budget_bytes, std::size_t host_snapshot_budget_bytes,
           std::optional<std::uint64_t> remote_fleet_seed, const std::string& remote_revision,
           bool remote_write_through, std::uint32_t remote_snapshot_candidates, bool remote_turn_ends,
           std::uint64_t remote_writer_id, const py_fleet_keys* state_events, const std::string& snapshot_eviction,
           std::uint32_t eviction_window) {
    cache_options o{.kv_blocks = kv_blocks,
                          .max_sequences = max_sequences,
                          .snapshot_budget_bytes = snapshot_budget_bytes.value_or(0),
                          .snapshot_ttl_steps = snapshot_ttl_steps,
                          .max_snapshots_per_path = max_snapshots_per_path,
                          .capture_interval = capture_interval,
                          .hasher_seed = hasher_seed,
                          .share_in_step = share_in_step,
                          .decode_checkpoint_interval = decode_checkpoint_interval,
                          .decode_checkpoints_per_sequence = decode_checkpoints_per_sequence,
                          .host_kv_budget_bytes = host_kv_budget_bytes,
                          .host_snapshot_budget_bytes = host_snapshot_budget_bytes,
                          .remote_snapshot_candidates = remote_snapshot_candidates,
                          .remote_write_through = remote_write_through,
                          .remote_turn_ends = remote_turn_ends,
                          .remote_writer_id = remote_writer_id,
                          .snapshot_eviction = eviction_of(snapshot_eviction),
                          .eviction_window = eviction_window};
    if (state_events) {
      state_events->check_model(m, "PrefixCache: state_events");
      o.state_events = state_events->ref();
      events_source_ = state_events->source();
      state_keys_ = nb::find(state_events);
    }
    const bool remote = remote_fleet_seed.has_value();
    if (remote) {
#if REPRISE_PYTHON_HAS_CONTENT_KEYS
      auto fingerprint = model_fingerprint::make(m, remote_revision);
      if (!fingerprint) raise(fingerprint.error(), "PrefixCache: the model's fingerprint for the remote tier");
      auto keyer = content_keyer::make({.fleet_seed = *remote_fleet_seed, .fingerprint = *fingerprint}, m);
      if (!keyer) raise(keyer.error(), "PrefixCache: the content keys of the remote tier");
      keyer_ = std::make_unique<content_keyer>(std::move(*keyer));
      o.remote_keys = keyer_.get();
#else
      (void)remote_revision;
      raise(errc::unsupported_config,
            "PrefixCache: this module was built without OpenSSL (reprise::sha256), which the remote tier's content "
            "keys need");
#endif
    }
    // Either host budget asks for a host tier; the C++ checks then apply (a host KV budget below one block is
    // budget_too_small, host snapshots with a policy that restores none unsupported_config).
    const bool host = host_kv_budget_bytes != 0 || host_snapshot_budget_bytes != 0;
    if (remote && !host)
      raise(errc::unsupported_config,
            "PrefixCache: the remote tier (remote_fleet_seed) sits below the host tier: values reach the store "
            "from host units and come back through them; set host_kv_budget_bytes");
    const catalog::policy_id id = find_policy(policy, "PrefixCache");
    const catalog::policy_entry& p = catalog::entry(id);
    check_snapshot_budget(m, policy, p.restores_snapshots, snapshot_budget_bytes);
    if (host && !p.takes_host_tier) { // the C++ cache does not compile policy::tiers<policy::host_tier> with it
      const config_rule rule = config_rule::memory_only_host_tier;
      raise_message(to_errc(rule), "PrefixCache: policy '" + policy + "': " + describe(rule));
    }
    impl_ = make_cache(id, m, o, host, remote);
    remote_ = remote;
    policy_ = policy;
  }

  py_admit_plan admit(seq_id s, nb::handle tokens, const std::optional<py_extra_keys>& keys, nb::handle offsets) {
    const host_vector<token_id> t = as_int32_vector(tokens, "tokens");
    host_vector<std::uint32_t> o; // an empty ndarray has no shape to read: none is an empty span
    std::span<const std::uint32_t> capture_offsets;
    if (!offsets.is_none()) {
      o = as_uint32_vector(offsets, "capture_offsets");
      capture_offsets = span_of(o);
    }
    const extra_keys x = keys ? keys->view() : extra_keys{};
    const admit_plan p = keyed_or_raise(impl_->admit(s, span_of(t), x, capture_offsets), x, t.size(), "admit");
    return {owned_array(p.block_table),
            p.shared_blocks,
            p.kv_matched_tokens,
            p.usable_tokens,
            p.tokens_lost_to_missing_snapshot,
            p.restore_slot,
            exactness_name(p.restore_exactness),
            capture_array(p.captures),
            p.copy_src,
            p.copy_dst,
            p.restore_from_host,
            {p.captures.begin(), p.captures.end()}};
  }

  void commit(seq_id s, std::uint32_t n, nb::handle written) {
    if (written.is_none()) return check(impl_->commit(s, n, {}), "commit");
    nb::object positions = nb::borrow(written);
    // A plan's capture array as it is: [n, 2] (position, slot) or [n, 3] (sequence, position, slot); the
    // position is the next-to-last column of both.
    const nb::object arr = nb::module_::import_("numpy").attr("asarray")(written);
    if (nb::cast<int>(arr.attr("ndim")) == 2) {
      const auto cols = nb::cast<std::size_t>(arr.attr("shape")[1]);
      if (cols != 2 && cols != 3)
        raise_message(errc::size_mismatch, "commit: a 2-D captures_written must be a plan's captures, [n, 2] "
                                           "(position, slot), or kernel_captures(), [n, 3] (sequence, position, "
                                           "slot); got " + std::to_string(cols) + " columns");
      positions = arr[nb::make_tuple(nb::slice(nb::none(), nb::none(), nb::none()), cols - 2)];
    }
    const host_vector<std::uint32_t> w = as_uint32_vector(positions, "captures_written");
    check(impl_->commit(s, n, span_of(w)), "commit");
  }

  py_extend_plan extend(seq_id s, nb::handle tokens) {
    const host_vector<token_id> t = as_int32_vector(tokens, "tokens");
    const extend_plan p = value_or_raise(impl_->extend(s, span_of(t)), "extend");
    return {owned_array(p.new_blocks), p.first_new_block, capture_array(p.captures),
            {p.captures.begin(), p.captures.end()}};
  }

  py_finish_plan finish(seq_id s, bool last_turn) {
    const finish_plan p = value_or_raise(impl_->finish(s, {.last_turn = last_turn}), "finish");
    return {p.capture.position, p.capture.slot};
  }

  void release(seq_id s) { check(impl_->release(s), "release"); }

  py_fork_plan fork(seq_id src, seq_id dst) {
    const fork_plan p = value_or_raise(impl_->fork(src, dst), "fork");
    return {owned_array(p.block_table), p.copy_src, p.copy_dst, p.copy_recurrent_state};
  }

  void step_complete(epoch_t n) { check(impl_->step_complete(n), "step_complete"); }

  py_transfers take_transfers() {
    const transfer_plan t = impl_->take_transfers();
    std::vector<py_remote_put> puts;
    puts.reserve(t.remote_puts.size());
    for (const remote_put& p : t.remote_puts)
      puts.push_back({item_name(p.item), p.unit, p.device, bytes_of(p.key),
                      nb::bytes(reinterpret_cast<const char*>(p.header.data()), p.header.size()),
                      {p.kv_units.begin(), p.kv_units.end()}});
    return {move_array(t.kv_offload), move_array(t.snapshot_offload), move_array(t.kv_onboard), std::move(puts)};
  }

  nb::list probe(nb::handle tokens, const std::optional<py_extra_keys>& keys) {
    const host_vector<token_id> t = as_int32_vector(tokens, "tokens");
    const extra_keys x = keys ? keys->view() : extra_keys{};
    const probe_plan p = keyed_or_raise(impl_->probe(span_of(t), x), x, t.size(), "probe");
    nb::list out;
    for (const remote_probe& k : p.keys) out.append(nb::make_tuple(item_name(k.item), bytes_of(k.key)));
    return out;
  }

  py_fetch_plan prefetch(nb::handle tokens, const std::optional<py_extra_keys>& keys, nb::handle in_store) {
    const host_vector<token_id> t = as_int32_vector(tokens, "tokens");
    std::vector<content_key> present;
    if (!in_store.is_none())
      for (nb::handle k : in_store) present.push_back(key_of(k, "prefetch: in_store"));
    const std::span<const content_key> found(present);
    const extra_keys x = keys ? keys->view() : extra_keys{};
    const fetch_plan p =
        keyed_or_raise(impl_->prefetch(span_of(t), x, in_store.is_none() ? nullptr : &found), x, t.size(), "prefetch");
    py_fetch_plan out{{}, p.blocks};
    for (const remote_fetch& f : p.fetches)
      out.fetches.push_back({item_name(f.item), f.unit, bytes_of(f.key), {f.kv_units.begin(), f.kv_units.end()}});
    return out;
  }

  void fetched(const std::string& item, std::uint32_t unit, const std::optional<nb::bytes>& header) {
    const remote_item i = item_of(item);
    const std::span<const std::byte> h =
        header ? std::span<const std::byte>(reinterpret_cast<const std::byte*>(header->c_str()), header->size())
               : std::span<const std::byte>{};
    check(impl_->fetched(i, unit, h), "fetched");
  }

  std::vector<py_state_event> take_state_events() {
    const std::span<const state_event> events = impl_->take_state_events();
    std::vector<py_state_event> out;
    out.reserve(events.size());
    for (const state_event& e : events) out.push_back({e, events_source_});
    return out;
  }
  const nb::object& state_keys() const noexcept { return state_keys_; }

  bool remote() const noexcept { return remote_; }
  void check_invariants() const { check(impl_->check_invariants(), "check_invariants"); }
  nb::object block_table(seq_id s) const { return owned_array(impl_->block_table(s)); }

  nb::dict metrics() const {
    const cache_metrics& m = impl_->metrics();
    nb::dict d;
    for_each_metric([&](metric id, auto member) {
      const std::string_view name = metric_info_of(id).name;
      d[nb::str(name.data(), name.size())] = m.*member;
    });
    return d;
  }

  const cache_base& impl() const { return *impl_; }
  const std::string& policy() const { return policy_; }

private:
#if REPRISE_PYTHON_HAS_CONTENT_KEYS
  std::unique_ptr<content_keyer> keyer_; ///< the remote tier's keys; the cache points to it, so it outlives it
#endif
  nb::object state_keys_ = nb::none(); ///< the FleetKeys of the state events, kept alive as long as the cache
  std::uint64_t events_source_ = 0;    ///< its FleetKeys.source
  std::unique_ptr<cache_base> impl_;
  std::string policy_;
  bool remote_ = false;
};

} // namespace

catalog::policy_id find_policy(const std::string& name, std::string_view where) {
  if (const auto id = catalog::find_policy(name)) return *id;
  for (const deprecated_name& d : deprecated_policies)
    if (name == d.name) {
      const std::string warning = std::string(where) + ": policy '" + name + "' is deprecated, use '" +
                                  std::string(d.now) + "' (the same policy; the names are reprise-sim's too)";
      if (PyErr_WarnEx(PyExc_DeprecationWarning, warning.c_str(), 2) != 0) throw nb::python_error();
      return *catalog::find_policy(d.now);
    }
  std::string names;
  for (const catalog::policy_entry& p : catalog::policy_table)
    names.append(names.empty() ? "" : ", ").append(p.name);
  throw nb::value_error((std::string(where) + ": unknown policy '" + name + "' (policies: " + names +
                         "; deprecated names: " + deprecated_policy_list() + ")")
                            .c_str());
}

void bind_cache(nb::module_& m) {
  nb::class_<py_extra_keys>(m, "ExtraKeys",
                            "What besides the tokens decides whether two prefixes may share cached state. Different "
                            "model revisions, LoRA ids or tenant salts never share a block or a snapshot; different "
                            "tenant salts never share anything. Media items are positional: each keys the blocks and "
                            "snapshots from its position on, so a prefix before a prompt's first image is shared "
                            "with text prompts, and past it only the same item at the same position shares.")
      .def(
          "__init__",
          [](py_extra_keys* self, std::uint64_t model_revision, std::uint64_t lora_id, std::uint64_t tenant_salt,
             nb::handle media) {
            py_extra_keys k;
            k.model_revision = model_revision;
            k.lora_id = lora_id;
            k.tenant_salt = tenant_salt;
            if (!media.is_none()) {
              std::size_t i = 0;
              for (nb::handle item : media) {
                const std::string at = "ExtraKeys: media[" + std::to_string(i++) + "]";
                if (!nb::isinstance<nb::tuple>(item) || nb::len(item) != 2)
                  throw nb::type_error((at + ": a media item is a (position, digest bytes) tuple").c_str());
                const nb::handle position = item[0], digest = item[1];
                if (!nb::isinstance<nb::int_>(position) || nb::isinstance<nb::bool_>(position))
                  throw nb::type_error((at + ": the position is an int (the token index of its placeholders)").c_str());
                const auto p = nb::cast<std::int64_t>(position);
                if (p < 0 || p > std::int64_t{std::numeric_limits<std::uint32_t>::max()})
                  throw nb::value_error((at + ": the position " + std::to_string(p) + " is not a token index").c_str());
                if (!nb::isinstance<nb::bytes>(digest))
                  throw nb::type_error(
                      (at + ": the digest is bytes (a digest of the media, at most 32 bytes)").c_str());
                k.positions.push_back(static_cast<std::uint32_t>(p));
                k.digests.push_back(nb::borrow<nb::bytes>(digest));
              }
            }
            k.link();
            new (self) py_extra_keys(k);
          },
          nb::kw_only(), nb::arg("model_revision") = 0, nb::arg("lora_id") = 0, nb::arg("tenant_salt") = 0,
          nb::arg("media") = nb::none(),
          nb::sig("def __init__(self, *, model_revision: int = 0, lora_id: int = 0, tenant_salt: int = 0, "
                  "media: collections.abc.Iterable[tuple[int, bytes]] | None = None) -> None"),
          "`media`: (position, digest) per media item of the prompt, sorted by strictly increasing position: the "
          "token index where its placeholder tokens start, and a digest of the media (at most 32 bytes), never "
          "the media itself. Items out of order, at one position twice, past the prompt's end or with a longer "
          "digest are refused by the call that uses them (InvalidArgument, OutOfRange), which changes nothing.")
      .def_ro("model_revision", &py_extra_keys::model_revision, "Model revision.")
      .def_ro("lora_id", &py_extra_keys::lora_id, "LoRA adapter id.")
      .def_ro("tenant_salt", &py_extra_keys::tenant_salt, "Tenant isolation salt.")
      .def_prop_ro(
          "media",
          [](const py_extra_keys& k) {
            nb::list out;
            for (std::size_t i = 0; i < k.positions.size(); ++i)
              out.append(nb::make_tuple(k.positions[i], k.digests[i]));
            return out;
          },
          nb::for_getter(nb::sig("def media(self) -> list[tuple[int, bytes]]")),
          "The media items, as (position, digest) tuples.");

  nb::class_<py_admit_plan>(m, "AdmitPlan",
                            "What `admit` decided. Arrays are read-only copies owned by the plan: they stay valid "
                            "after later cache calls.")
      .def_prop_ro("block_table", [](const py_admit_plan& p) { return p.block_table; },
                   nb::for_getter(nb::sig("def block_table(self) -> numpy.typing.NDArray[numpy.int32]")),
              "int32 [ceil(L / B)] block ids; the first `shared_blocks` are shared and read-only.")
      .def_ro("shared_blocks", &py_admit_plan::shared_blocks, "Leading blocks that are shared cached blocks.")
      .def_ro("kv_matched_tokens", &py_admit_plan::kv_matched_tokens,
              "Tokens whose KV is cached; the engine writes KV only at positions >= this.")
      .def_ro("usable_tokens", &py_admit_plan::usable_tokens,
              "Tokens whose prefill is skipped: the engine computes [usable_tokens, L).")
      .def_ro("tokens_lost_to_missing_snapshot", &py_admit_plan::tokens_lost_to_missing_snapshot,
              "kv_matched_tokens - usable_tokens: KV-cached tokens recomputed for lack of a snapshot.")
      .def_ro("restore_slot", &py_admit_plan::restore_slot,
              "Snapshot slot to copy into the live recurrent state before prefill, or -1 (start from zero). With "
              "restore_from_host, a unit of the host snapshot pools instead.")
      .def_ro("restore_from_host", &py_admit_plan::restore_from_host,
              "Host tier: restore_slot names a host snapshot unit, copied from the host pools straight into the "
              "live state (after the transfers of take_transfers()). False without a host tier.")
      .def_ro("copy_src", &py_admit_plan::copy_src,
              "A partial block kept at a turn's end to copy into copy_dst before the prefill (copy on write), "
              "or -1.")
      .def_ro("copy_dst", &py_admit_plan::copy_dst,
              "The sequence's own block (block_table[shared_blocks]) that receives copy_src, or -1.")
      .def_ro("restore_exactness", &py_admit_plan::restore_exactness,
              "'prefill_exact' (bitwise a cold prefill) or 'decode_continuation'.")
      .def_prop_ro("captures", [](const py_admit_plan& p) { return p.captures; },
                   nb::for_getter(nb::sig("def captures(self) -> numpy.typing.NDArray[numpy.int64]")),
              "int64 [n, 2] (position, slot) pairs, increasing positions in (usable_tokens, L]: the prefill writes "
              "the recurrent state after `position` tokens into `slot`. A position off the alignment grid ('chat': "
              "the last shared KV block) is no chunk boundary: end a prefill piece there and copy the live state.")
      .def("kernel_captures",
           [](const py_admit_plan& p, std::int64_t sequence) { return kernel_capture_array(p.raw_captures, sequence); },
           nb::arg("sequence") = 0,
           nb::sig("def kernel_captures(self, sequence: int = 0) -> numpy.typing.NDArray[numpy.int64]"),
           "The captures in the kernels' form: int64 [n, 3] rows of (sequence, position, slot), `sequence` being "
           "the sequence's index in the kernel call's batch (its row in cu_seqlens). Pass it to the reprise.ops "
           "prefill kernels' `captures` as it is (numpy.concatenate the rows of several sequences), and to "
           "commit's captures_written once written. A new array on each call.")
      .def("__repr__", [](const py_admit_plan& p) {
        return "AdmitPlan(blocks=" + std::to_string(nb::len(p.block_table)) +
               ", shared_blocks=" + std::to_string(p.shared_blocks) +
               ", kv_matched_tokens=" + std::to_string(p.kv_matched_tokens) +
               ", usable_tokens=" + std::to_string(p.usable_tokens) +
               ", restore_slot=" + std::to_string(p.restore_slot) +
               ", captures=" + std::to_string(nb::len(p.captures)) + ")";
      });

  nb::class_<py_extend_plan>(m, "ExtendPlan", "What `extend` decided: blocks appended to the block table.")
      .def_prop_ro("new_blocks", [](const py_extend_plan& p) { return p.new_blocks; },
                   nb::for_getter(nb::sig("def new_blocks(self) -> numpy.typing.NDArray[numpy.int32]")),
                   "int32 new block ids (possibly none), a copy.")
      .def_ro("first_new_block", &py_extend_plan::first_new_block, "Block-table index of new_blocks[0].")
      .def_prop_ro("captures", [](const py_extend_plan& p) { return p.captures; },
                   nb::for_getter(nb::sig("def captures(self) -> numpy.typing.NDArray[numpy.int64]")),
                   "Decode checkpoint ('chat' with decode_checkpoint_interval): (n, 2) int64 rows of (position, "
                   "slot), at most one; after this step's decode copy the live state into slot and list position "
                   "in the next commit's captures_written (the array itself is accepted).")
      .def("kernel_captures",
           [](const py_extend_plan& p, std::int64_t sequence) { return kernel_capture_array(p.raw_captures, sequence); },
           nb::arg("sequence") = 0,
           nb::sig("def kernel_captures(self, sequence: int = 0) -> numpy.typing.NDArray[numpy.int64]"),
           "The captures as int64 [n, 3] rows of (sequence, position, slot), as AdmitPlan.kernel_captures.")
      .def("__repr__", [](const py_extend_plan& p) {
        return "ExtendPlan(new_blocks=" + std::to_string(nb::len(p.new_blocks)) +
               ", first_new_block=" + std::to_string(p.first_new_block) +
               ", captures=" + std::to_string(p.raw_captures.size()) + ")";
      });

  nb::class_<py_finish_plan>(m, "FinishPlan",
                             "What `finish` decided: an end-of-turn capture of the live state, or none.")
      .def_ro("capture_position", &py_finish_plan::capture_position, "Tokens the captured state has folded in.")
      .def_ro("capture_slot", &py_finish_plan::capture_slot,
              "Slot to copy the live recurrent state into in this step, or -1 (no capture).")
      .def("__repr__", [](const py_finish_plan& p) {
        return "FinishPlan(capture_position=" + std::to_string(p.capture_position) +
               ", capture_slot=" + std::to_string(p.capture_slot) + ")";
      });

  nb::class_<py_fork_plan>(m, "ForkPlan", "What `fork` decided.")
      .def_prop_ro("block_table", [](const py_fork_plan& p) { return p.block_table; },
                   nb::for_getter(nb::sig("def block_table(self) -> numpy.typing.NDArray[numpy.int32]")),
                   "int32 block table of the destination, a copy.")
      .def_ro("copy_src", &py_fork_plan::copy_src, "Partial last block to copy from, or -1.")
      .def_ro("copy_dst", &py_fork_plan::copy_dst, "Block to copy it into, or -1.")
      .def_ro("copy_recurrent_state", &py_fork_plan::copy_recurrent_state,
              "Whether the engine must copy the source's live recurrent state into the destination's.")
      .def("__repr__", [](const py_fork_plan& p) {
        return "ForkPlan(blocks=" + std::to_string(nb::len(p.block_table)) + ", copy_src=" +
               std::to_string(p.copy_src) + ", copy_dst=" + std::to_string(p.copy_dst) +
               ", copy_recurrent_state=" + (p.copy_recurrent_state ? "True" : "False") + ")";
      });

  m.attr("NO_UNIT") = no_unit;

  nb::class_<py_remote_put>(m, "RemotePut",
                            "A value for the fleet's store (remote tier): store `header` and the unit's bytes under "
                            "`key`, reading the unit before the offloads that follow overwrite it. A 'turn_end' "
                            "(remote_turn_ends) is one value of two units: its payload is its partial GPU KV block "
                            "`kv_units[0]` (NO_UNIT: one block of zeros, a turn end at a block boundary) followed "
                            "by GPU snapshot slot `unit`, bytes_per_kv_block + bytes_per_snapshot bytes; the full "
                            "blocks it links to are 'block' puts from GPU memory (`device`), each put once.")
      .def_ro("item", &py_remote_put::item,
              "'block' (a KV unit), 'snapshot' (a snapshot unit) or 'turn_end' (a partial KV block and a snapshot slot).")
      .def_ro("unit", &py_remote_put::unit,
              "The unit to read: a host unit, or with `device` a GPU block / snapshot slot whose step completed; "
              "a turn end's snapshot slot.")
      .def_ro("device", &py_remote_put::device, "Whether `unit` is in GPU memory (write-through; every turn end).")
      .def_ro("key", &py_remote_put::key, "The 32-byte content key to store it under.")
      .def_ro("header", &py_remote_put::header, "The header to store with it, returned to fetched() on a hit.")
      .def_ro("kv_units", &py_remote_put::kv_units,
              "A turn end's partial GPU KV block (NO_UNIT: a block of zeros); empty for a block or a snapshot.")
      .def("__repr__", [](const py_remote_put& p) {
        return "RemotePut(item='" + p.item + "', unit=" + std::to_string(p.unit) +
               ", device=" + (p.device ? "True" : "False") + kv_units_repr(p.kv_units) + ")";
      });

  nb::class_<py_remote_fetch>(m, "RemoteFetch",
                              "A fetch prefetch() planned: get `key` from the store into host unit `unit`, then "
                              "report fetched(item, unit, header). A 'turn_end' is fetched only by a prefetch given "
                              "in_store, with a 'block' fetch for each block it links to: its payload is one KV "
                              "unit, written into host KV unit kv_units[0], then one snapshot unit, written into "
                              "host snapshot unit `unit`; it is kept once it and all its links were reported.")
      .def_ro("item", &py_remote_fetch::item,
              "'block' (host KV pools), 'snapshot' (host snapshot pools) or 'turn_end' (both).")
      .def_ro("unit", &py_remote_fetch::unit, "The reserved host unit (a turn end's: its snapshot unit).")
      .def_ro("key", &py_remote_fetch::key, "The 32-byte content key.")
      .def_ro("kv_units", &py_remote_fetch::kv_units,
              "A turn end's reserved host KV units, in payload order (NO_UNIT: discard that part); empty for a "
              "block or a snapshot.")
      .def("__repr__", [](const py_remote_fetch& f) {
        return "RemoteFetch(item='" + f.item + "', unit=" + std::to_string(f.unit) + kv_units_repr(f.kv_units) + ")";
      });

  nb::class_<py_fetch_plan>(m, "FetchPlan", "What prefetch() planned.")
      .def_ro("fetches", &py_fetch_plan::fetches, "The RemoteFetch list, blocks first.")
      .def_ro("blocks", &py_fetch_plan::blocks, "Blocks past the prompt's local match that are fetched.")
      .def("__repr__", [](const py_fetch_plan& p) {
        return "FetchPlan(fetches=" + std::to_string(p.fetches.size()) + ", blocks=" + std::to_string(p.blocks) + ")";
      });

  nb::class_<py_transfers>(
      m, "Transfers",
      "The moves between GPU pools and host pools that the cache calls since the previous take_transfers() "
      "planned (host tier). Each list is an int32 [n, 2] array of (src, dst) unit ids, a copy owned by this "
      "object; a unit is one KV block across every attention layer's pool, or one snapshot slot across every "
      "recurrent layer's pools. Run them in this order, before any other work those calls planned (restores, "
      "including restore_from_host; copy_src -> copy_dst; prefill; decode; captures):\n"
      "  1. kv_offload (GPU block -> host KV unit) and snapshot_offload (GPU snapshot slot -> host snapshot "
      "unit): what the GPU pools evicted; the calls handed those GPU units out again, so their old bytes are "
      "read first;\n"
      "  2. kv_onboard (host KV unit -> GPU block): cached blocks found in the host tier, copied into the blocks "
      "the block tables name (a turn end's partial block into block_table[shared_blocks]).\n"
      "For every pool (one per layer, leading dimension = units) a move is `dst_pool[dst] = src_pool[src]`: "
      "reprise.ops.transfer_units(src_pools, dst_pools, pairs), or numpy fancy indexing "
      "`dst_pool[pairs[:, 1]] = src_pool[pairs[:, 0]]` (within one list no destination repeats). Host units read "
      "by an onboard or a restore are not handed to an offload before step_complete of the step that read them.")
      .def_prop_ro("kv_offload", [](const py_transfers& t) { return t.kv_offload; },
                   nb::for_getter(nb::sig("def kv_offload(self) -> numpy.typing.NDArray[numpy.int32]")),
                   "int32 [n, 2] (GPU block, host KV unit): device to host, first.")
      .def_prop_ro("snapshot_offload", [](const py_transfers& t) { return t.snapshot_offload; },
                   nb::for_getter(nb::sig("def snapshot_offload(self) -> numpy.typing.NDArray[numpy.int32]")),
                   "int32 [n, 2] (GPU snapshot slot, host snapshot unit): device to host, first.")
      .def_prop_ro("kv_onboard", [](const py_transfers& t) { return t.kv_onboard; },
                   nb::for_getter(nb::sig("def kv_onboard(self) -> numpy.typing.NDArray[numpy.int32]")),
                   "int32 [n, 2] (host KV unit, GPU block): host to device, after the offloads.")
      .def_ro("remote_puts", &py_transfers::remote_puts,
              "Remote tier: the values for the store (RemotePut list); read their units first, before the "
              "offloads.")
      .def_prop_ro("empty",
                   [](const py_transfers& t) {
                     return nb::len(t.kv_offload) == 0 && nb::len(t.snapshot_offload) == 0 &&
                            nb::len(t.kv_onboard) == 0 && t.remote_puts.empty();
                   },
                   "Whether there is nothing to move.")
      .def("__repr__", [](const py_transfers& t) {
        return "Transfers(kv_offload=" + std::to_string(nb::len(t.kv_offload)) +
               ", snapshot_offload=" + std::to_string(nb::len(t.snapshot_offload)) +
               ", kv_onboard=" + std::to_string(nb::len(t.kv_onboard)) + ")";
      });

  std::string policy_doc = "Named policies (compile-time C++ policies instantiated in this module, the catalog "
                           "reprise-sim offers too):\n";
  nb::dict policy_dict;
  for (const catalog::policy_entry& p : catalog::policy_table) {
    policy_doc.append("  ").append(p.name).append(": ").append(p.doc).append("\n");
    policy_dict[nb::str(p.name.data(), p.name.size())] = nb::str(p.doc.data(), p.doc.size());
  }
  policy_doc += "Deprecated names (each warns with a DeprecationWarning): " + deprecated_policy_list() + ".\n";
  m.attr("POLICIES") = policy_dict;
  m.def(
      "policy_names", [] { return names_of(catalog::policy_table); },
      "The names PrefixCache takes, in the catalog's order (reprise::catalog::policy_table, the names reprise-sim's "
      "--policy takes).");
  m.def(
      "metric_names", [] { return names_of(metric_table); },
      "The keys of PrefixCache.metrics(), in order: the fields of the C++ cache_metrics, from the one list that "
      "also names reprise-sim's metric columns (reprise::metric_table).");

  // The policies that take remote_turn_ends, from the catalog: "'snapshot_turns', ..., 'chat'".
  std::string turn_end_policies;
  for (const catalog::policy_entry& p : catalog::policy_table)
    if (p.takes_turn_ends) turn_end_policies.append(turn_end_policies.empty() ? "'" : ", '").append(p.name) += "'";
  const std::string init_doc =
      "Allocates every pool. `share_in_step` ('block_sharing' only): a prompt also shares the full blocks that "
      "prompts admitted earlier in the same step compute, before their commit (cache_options::share_in_step "
      "states the engine's precondition). A non-zero `host_kv_budget_bytes` or `host_snapshot_budget_bytes` "
      "adds the host tier (policy::tiers<policy::host_tier>): what the GPU pools evict is offloaded into host "
      "pools of host_kv_units KV units (floor(host_kv_budget_bytes / bytes_per_kv_block)) and "
      "host_snapshot_units snapshot units, and onboarded on a later hit; take_transfers() lists the moves. "
      "Raises InvalidArgument (kv_blocks or max_sequences is 0; decode_checkpoints_per_sequence 0 with "
      "'chat'), OutOfRange (above 2^31 - 1), UnsupportedConfig (block size, a policy that does not fit the "
      "model, share_in_step with a policy other than 'block_sharing' or with a host tier, a host tier with "
      "'memory_only', host snapshots with a policy that restores none), BudgetTooSmall (a snapshot policy "
      "on a model with recurrent layers without snapshot_budget_bytes, or with a budget below one snapshot: "
      "the message gives the bytes of one snapshot; with a host tier, a host KV budget below one KV block or a "
      "non-zero host snapshot budget below one snapshot), Misaligned (capture_interval 0 or off the alignment "
      "unit with the policies that capture every interval; decode_checkpoint_interval off it with 'chat'), "
      "ValueError (unknown policy name); each message names the C++ configuration rule broken and what to "
      "change. "
      "A `remote_fleet_seed` adds the remote tier below the host tier "
      "(policy::tiers<policy::host_tier, policy::remote_tier>): prefill-exact blocks and snapshots named by "
      "content keys that every process with the same seed, model and `remote_revision` (the weights' name) "
      "computes alike; take_transfers() lists remote_puts for the store, probe() / prefetch() / fetched() "
      "bring values back through host units. `remote_write_through`: put every value once its step "
      "completed, from GPU memory; otherwise when the host tier evicts it. `remote_turn_ends` (a policy that "
      "captures turn ends and accepts decode continuations: " + turn_end_policies + "): every turn end also goes "
      "to the store, as a 'turn_end' value (its snapshot and its partial block) linked to the decode-filled "
      "blocks before it, each put once as a 'block' value by the first turn end that holds it, so a "
      "conversation's puts stay flat in its length; all put from GPU memory once their step completed, whatever "
      "the write mode; a prefetch given in_store then fetches the deepest turn end under the prompt whose links "
      "the store has, and another engine continues the conversation from it bitwise as the writer would have. `remote_writer_id` names this engine's computations in the turn ends "
      "it writes (unique in the fleet; 0: drawn at random). Raises UnsupportedConfig (no host tier, "
      "'memory_only', a module built without OpenSSL; remote_write_through or remote_turn_ends without the "
      "remote tier, remote_turn_ends with another policy). "
      "`state_events` (a FleetKeys made from the same config): the cache reports what its GPU pools hold for a "
      "fleet router (StateRouter), every full KV block published or evicted and every snapshot published or "
      "dropped, named by those keys; take_state_events() hands the reports out. Raises InvalidArgument (keys "
      "made for another model). "
      "`snapshot_eviction`: which idle snapshot goes when a capture needs a slot and none is free: 'lru' (the "
      "least recently published or restored) or 'cost_aware' (of the `eviction_window` oldest idle snapshots, "
      "0 = 8, at most 64, the one whose loss costs the fewest prefill FLOPs per step held, from the model's "
      "layer shapes; cache_options::snapshot_eviction). Raises ValueError (another name).";

  const std::string class_doc =
      "A prefix cache over a runtime model (reprise::runtime_prefix_cache<Policy>). Drive it from one thread: "
      "admit -> (restore, prefill, captures) -> commit; extend for decode tokens; finish or release; "
      "step_complete(n) once step n's kernels are done. A call that raises has changed nothing.\n\n" +
      policy_doc;

  nb::class_<py_cache>(m, "PrefixCache", class_doc.c_str())
      .def(nb::init<const model_config&, const std::string&, std::uint32_t, std::uint32_t, std::optional<std::size_t>,
                    std::uint64_t,
                    std::uint32_t, std::uint32_t, std::optional<std::uint64_t>, bool, std::uint32_t,
                    std::uint32_t, std::size_t, std::size_t, std::optional<std::uint64_t>, const std::string&, bool,
                    std::uint32_t, bool, std::uint64_t, const py_fleet_keys*, const std::string&, std::uint32_t>(),
           nb::arg("config"), nb::arg("policy") = "snapshot_turns", nb::kw_only(), nb::arg("kv_blocks"),
           nb::arg("max_sequences") = 256, nb::arg("snapshot_budget_bytes") = nb::none(), nb::arg("snapshot_ttl_steps") = 0,
           nb::arg("max_snapshots_per_path") = 0, nb::arg("capture_interval") = 0,
           nb::arg("hasher_seed") = nb::none(), nb::arg("share_in_step") = false,
           nb::arg("decode_checkpoint_interval") = 0, nb::arg("decode_checkpoints_per_sequence") = 2,
           nb::arg("host_kv_budget_bytes") = 0, nb::arg("host_snapshot_budget_bytes") = 0,
           nb::arg("remote_fleet_seed") = nb::none(), nb::arg("remote_revision") = "",
           nb::arg("remote_write_through") = false, nb::arg("remote_snapshot_candidates") = 2,
           nb::arg("remote_turn_ends") = false, nb::arg("remote_writer_id") = 0,
           nb::arg("state_events").none() = nb::none(), nb::arg("snapshot_eviction") = "lru",
           nb::arg("eviction_window") = 0, init_doc.c_str())
      .def("admit", &py_cache::admit, nb::arg("seq_id"), nb::arg("tokens"), nb::arg("extra_keys") = nb::none(),
           nb::arg("capture_offsets") = nb::none(),
           nb::sig("def admit(self, seq_id: int, tokens: numpy.typing.ArrayLike, extra_keys: ExtraKeys | None = None, "
                   "capture_offsets: numpy.typing.ArrayLike | None = None) -> AdmitPlan"),
           "Admits sequence `seq_id` with prompt `tokens` (int32 array-like: list, numpy array, buffer) and plans "
           "its prefill. `capture_offsets` (policy 'chat'): positions where the caller wants snapshots, such as "
           "its system prompt's end rounded down to `block_size` (off the `alignment` grid they split the "
           "prefill there), so a second conversation over that system prompt restores there at its first "
           "meeting. Raises DuplicateSequence, InvalidArgument (empty prompt, digest over 32 bytes, capture "
           "offsets to a policy that takes none), OutOfRange (prompt too long, an offset outside (0, len]), "
           "Misaligned (an offset off the capture grid), PoolExhausted. Returns an AdmitPlan.")
      .def("commit", &py_cache::commit, nb::arg("seq_id"), nb::arg("n_computed"),
           nb::arg("captures_written") = nb::none(),
           nb::sig("def commit(self, seq_id: int, n_computed: int, captures_written: numpy.typing.ArrayLike | None = "
                   "None) -> None"),
           "Declares the first `n_computed` tokens computed (non-decreasing): publishes full blocks and the planned "
           "captures listed in `captures_written`: positions, or a plan's capture array as it is ([n, 2] "
           "`captures` or [n, 3] `kernel_captures()`, of the captures written); unlisted captures <= n_computed "
           "are dropped. "
           "Raises UnknownSequence, OutOfRange, InvalidArgument, UnwrittenBlocks (share_in_step: a block shared "
           "within the step is not written yet, or never will be by its writer; release the sequence then).")
      .def("extend", &py_cache::extend, nb::arg("seq_id"), nb::arg("tokens"),
           nb::sig("def extend(self, seq_id: int, tokens: numpy.typing.ArrayLike) -> ExtendPlan"),
           "Appends decode tokens; returns an ExtendPlan with the blocks they need. Raises UnknownSequence, "
           "PoolExhausted, OutOfRange.")
      .def("finish", &py_cache::finish, nb::arg("seq_id"), nb::kw_only(), nb::arg("last_turn") = false,
           "Ends a turn: plans an end-of-turn capture when the policy has end_of_turn, then releases the "
           "sequence. Returns a FinishPlan. `last_turn=True`: the conversation ends here, nothing is captured and "
           "the snapshots it continued from go first when slots are short. Raises as release, and "
           "InvalidArgument when a turn end would be captured while the live state is not at the committed "
           "position (prompt never committed whole, or more than the last sampled token uncommitted).")
      .def("release", &py_cache::release, nb::arg("seq_id"),
           "Drops the sequence's references; its blocks stay cached. Raises DoubleRelease, UnknownSequence.")
      .def("fork", &py_cache::fork, nb::arg("src"), nb::arg("dst"),
           "Copy-on-write fork of a fully committed sequence. Returns a ForkPlan. Raises UnknownSequence, "
           "DuplicateSequence, InvalidArgument (uncommitted tokens), PoolExhausted.")
      .def("step_complete", &py_cache::step_complete, nb::arg("step"),
           "Every kernel of step `step` has finished: what was given up during it becomes reusable. Raises "
           "OutOfRange past the last numberable step.")
      .def("take_transfers", &py_cache::take_transfers,
           "Host tier: the moves between GPU and host pools that admit, extend, fork and finish planned since the "
           "previous call, as a Transfers (see its order). Call it after the step's cache calls (or after each) "
           "and run the moves before the work those calls planned. Empty without a host tier.")
      .def("probe", &py_cache::probe, nb::arg("tokens"), nb::arg("extra_keys") = nb::none(),
           nb::sig("def probe(self, tokens: numpy.typing.ArrayLike, extra_keys: ExtraKeys | None = None) -> "
                   "list[tuple[str, bytes]]"),
           "Remote tier: the content keys a prefetch of `tokens` could fetch now, as (item, 32-byte key) pairs, "
           "'block' keys in chain order, 'snapshot' keys deepest first, then (remote_turn_ends) 'turn_end' keys "
           "deepest first and the 'block' keys of the blocks they may link to past the local match. Reserves and changes nothing: ask the store which it has, then prefetch(tokens, "
           "in_store=those). Empty without a remote tier. Raises InvalidArgument, OutOfRange.")
      .def("prefetch", &py_cache::prefetch, nb::arg("tokens"), nb::arg("extra_keys") = nb::none(),
           nb::arg("in_store") = nb::none(),
           nb::sig("def prefetch(self, tokens: numpy.typing.ArrayLike, extra_keys: ExtraKeys | None = None, "
                   "in_store: collections.abc.Iterable[bytes] | None = None) -> FetchPlan"),
           "Remote tier: plans fetches into reserved host units of what `tokens` would reuse and the GPU and host "
           "tiers lack. With `in_store` (the keys a probe found in the store), only those: blocks up to the first "
           "absent, for a model with recurrent layers only up to the deepest snapshot found; with remote_turn_ends, "
           "the deepest turn end found instead when it is deeper (a 'turn_end' fetch). Run the remote_puts "
           "of the next take_transfers() (what the reservations evicted) before writing the units; report each "
           "fetch with fetched(). Raises InvalidArgument, OutOfRange, ValueError (a key not of 32 bytes).")
      .def("fetched", &py_cache::fetched, nb::arg("item"), nb::arg("unit"), nb::arg("header") = nb::none(),
           "Remote tier: the fetch into host unit `unit` ('block': of the host KV pools, 'snapshot': of the host "
           "snapshot pools, 'turn_end': the fetch's snapshot unit, its KV parts written into its kv_units) "
           "finished; `header` is the header the store returned with the value (its payload already written into "
           "the units), None for a miss. The value is kept only if the header is, byte for byte, the one the prompt "
           "implies. Raises InvalidArgument (no fetch of that item pending into that unit), ValueError (an item "
           "other than 'block', 'snapshot' or 'turn_end').")
      .def_prop_ro("remote_tier", &py_cache::remote, "Whether the cache has the remote tier.")
      .def("take_state_events", &py_cache::take_state_events,
           "With state_events: what this cache stored and removed in GPU memory since the previous call, as a list "
           "of StateEvent (copies: they stay valid after later calls), in the order it happened; for "
           "StateRouter.apply(engine, events). Call it once per step, after the step's cache calls. A block or "
           "snapshot offloaded to the host tier is reported removed. Empty without state_events.")
      .def_prop_ro("state_events", &py_cache::state_keys,
                   nb::for_getter(nb::sig("def state_events(self) -> FleetKeys | None")),
                   "The FleetKeys the cache reports its state events with, or None (no events).")
      .def("current_epoch", [](const py_cache& c) { return c.impl().current_epoch(); },
           "The step being scheduled now (starts at 0).")
      .def("metrics", &py_cache::metrics,
           "Counters since construction and current gauges, as a dict (cache_metrics' fields; the host_* ones "
           "count the host tier and stay 0 without it).")
      .def("check_invariants", &py_cache::check_invariants,
           "Recomputes the bookkeeping from scratch; raises InvariantViolated on a mismatch (a bug).")
      .def("block_table", &py_cache::block_table, nb::arg("seq_id"),
           nb::sig("def block_table(self, seq_id: int) -> numpy.typing.NDArray[numpy.int32]"),
           "A copy of the block table of a live sequence (empty if unknown).")
      .def_prop_ro("policy", &py_cache::policy, "The policy name as given (a deprecated name stays as given).")
      .def_prop_ro("block_size", [](const py_cache& c) { return c.impl().geometry().block_size; },
                   "Tokens per KV block.")
      .def_prop_ro("alignment", [](const py_cache& c) { return c.impl().geometry().alignment; },
                   "Snapshot alignment unit.")
      .def_prop_ro("bytes_per_snapshot", [](const py_cache& c) { return c.impl().geometry().bytes_per_snapshot; },
                   "Bytes of one snapshot (the snapshot budget's unit).")
      .def_prop_ro("kv_blocks", [](const py_cache& c) { return c.impl().kv_blocks(); },
                   "KV blocks of the engine's pool: block ids are in [0, kv_blocks).")
      .def_prop_ro("snapshot_slots", [](const py_cache& c) { return c.impl().snapshot_slots(); },
                   "Snapshot slots the engine must provide (ids [0, snapshot_slots)).")
      .def_prop_ro("host_kv_units", [](const py_cache& c) { return c.impl().host_kv_units(); },
                   "Units of the host KV pools the engine provides (host tier; 0 without): one unit holds one "
                   "block of every attention layer, ids [0, host_kv_units).")
      .def_prop_ro("host_snapshot_units", [](const py_cache& c) { return c.impl().host_snapshot_units(); },
                   "Units of the host snapshot pools the engine provides (host tier; 0 without): one unit holds "
                   "the state of every recurrent layer, ids [0, host_snapshot_units).")
      .def_prop_ro("hasher_seed", [](const py_cache& c) { return c.impl().hasher_seed(); }, "The hasher seed.")
      .def("__repr__", [](const py_cache& c) {
        const cache_metrics& m = c.impl().metrics();
        return "PrefixCache(policy='" + c.policy() + "', kv_blocks=" + std::to_string(c.impl().kv_blocks()) +
               ", snapshot_slots=" + std::to_string(c.impl().snapshot_slots()) +
               ", live_sequences=" + std::to_string(m.live_sequences) +
               ", blocks_cached=" + std::to_string(m.blocks_cached) +
               ", snapshots_held=" + std::to_string(m.snapshots_held) + ")";
      });
}

} // namespace reprise::python
