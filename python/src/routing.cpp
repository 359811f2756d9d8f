// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
/// \file
/// Routing a fleet by state (docs/routing.md) from Python: `FleetKeys` (routing::fleet_keys, the content keys
/// caches report under and the router hashes prompts with), `StateEvent` (reprise::state_event, copied out of
/// a cache's `take_state_events`), `StateRouter` (routing::state_router) and `RouteChoice`
/// (routing::route_choice).
///
/// The router is `state_router<state_keys_ref>`: it hashes through the same type-erased handle a cache
/// reports through, so it compiles without OpenSSL; only `FleetKeys` needs it. Every event keeps the identity
/// of the keys it was computed with (`FleetKeys.source`), so a router refuses events from caches that name
/// state with other keys instead of indexing keys no prompt will ever match. A call that raises has changed
/// nothing: `apply` checks a whole batch before applying any of it.

#include "routing.hpp"

#include <reprise/catalog.hpp>
#include <reprise/routing/state_router.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace reprise::python {
namespace {

namespace rt = reprise::routing;
using router_type = rt::state_router<state_keys_ref>;

const char* change_name(state_change c) noexcept { return c == state_change::stored ? "stored" : "removed"; }
const char* kind_name(state_kind k) noexcept { return k == state_kind::kv_block ? "kv_block" : "snapshot"; }

state_change change_of(const std::string& s) {
  if (s == "stored") return state_change::stored;
  if (s == "removed") return state_change::removed;
  throw nb::value_error(("StateEvent: unknown change '" + s + "' (stored or removed)").c_str());
}
state_kind kind_of(const std::string& s) {
  if (s == "kv_block") return state_kind::kv_block;
  if (s == "snapshot") return state_kind::snapshot;
  throw nb::value_error(("StateEvent: unknown kind '" + s + "' (kv_block or snapshot)").c_str());
}
exactness exactness_of(const std::string& s) {
  if (s == "prefill_exact") return exactness::prefill_exact;
  if (s == "decode_continuation") return exactness::decode_continuation;
  throw nb::value_error(("StateEvent: unknown exactness '" + s + "' (prefill_exact or decode_continuation)").c_str());
}

std::string hex_of(const std::uint8_t* bytes, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s.append({digits[bytes[i] >> 4], digits[bytes[i] & 15]});
  return s;
}
std::string hex_of(std::uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string repr(const py_state_event& e) {
  return std::string("StateEvent(change='") + change_name(e.event.change) + "', kind='" + kind_name(e.event.kind) +
         "', exactness='" + exactness_name(e.event.exact) + "', position=" + std::to_string(e.event.position) +
         ", key=" + hex_of(e.event.key.bytes.data(), 4) + "...)";
}

// ----- StateRouter -----

struct py_route_choice {
  std::uint32_t engine;
  std::uint64_t usable_tokens;
  std::uint32_t best_engine;
  std::uint64_t best_usable_tokens;
  bool redirected_by_load;
};

/// `StateRouter`: a `state_router` over the keys of a `FleetKeys`, which it keeps alive.
class py_state_router {
public:
  py_state_router(const model_config& m, const std::string& policy, const py_fleet_keys& keys, std::int64_t engines,
                  double load_slack, std::int64_t entries_per_engine, std::int64_t max_prompt_tokens)
      : policy_(policy), source_(keys.source()), keys_(nb::find(&keys)) {
    const catalog::policy_id id = find_policy(policy, "StateRouter");
    keys.check_model(m, "StateRouter: keys");
    const bool accepts = catalog::visit_policy(id, [](auto p) {
      return reprise::policy::policy_traits<typename decltype(p)::type>::accepts_decode_continuation;
    });
    const auto u32 = [](std::int64_t v) { // out of range: 0, which validate() refuses
      return v < 0 || v > std::numeric_limits<std::uint32_t>::max() ? 0u : static_cast<std::uint32_t>(v);
    };
    rt::router_options o = rt::router_options::for_model(m, u32(engines), accepts);
    o.load_slack = load_slack;
    o.entries_per_engine = u32(entries_per_engine);
    o.max_prompt_tokens = max_prompt_tokens < 0 ? 0 : static_cast<std::uint64_t>(max_prompt_tokens);
    if (const errc e = o.validate(); e != errc{})
      raise_message(e, "StateRouter: " + std::string(to_string(e)) +
                           ": router options out of range (engines in [1, " + std::to_string(rt::max_engines) +
                           "]; entries_per_engine >= 1 with engines x entries_per_engine <= " +
                           std::to_string(max_pool_ids) +
                           "; load_slack >= 0 and finite; max_prompt_tokens in [1, 2^32 - 1]); got engines=" +
                           std::to_string(engines) + ", entries_per_engine=" + std::to_string(entries_per_engine) +
                           ", load_slack=" + std::to_string(load_slack) +
                           ", max_prompt_tokens=" + std::to_string(max_prompt_tokens));
    ref_ = std::make_unique<state_keys_ref>(keys.ref());
    router_.emplace(value_or_raise(router_type::make(o, *ref_), "StateRouter"));
  }

  void apply(std::int64_t engine, nb::handle events) {
    const rt::engine_id e = engine_of(engine, "StateRouter.apply");
    std::vector<state_event> batch;
    if (nb::isinstance<py_state_event>(events)) {
      batch.push_back(checked(nb::cast<const py_state_event&>(events), "StateRouter.apply: the event"));
    } else {
      std::size_t i = 0;
      for (nb::handle h : events) {
        const std::string what = "StateRouter.apply: events[" + std::to_string(i++) + "]";
        if (!nb::isinstance<py_state_event>(h))
          throw nb::type_error((what + " is a " + nb::type_name(h.type()).c_str() + ", not a StateEvent").c_str());
        batch.push_back(checked(nb::cast<const py_state_event&>(h), what));
      }
    }
    for (const state_event& ev : batch) check(router_->apply(e, ev), "StateRouter.apply"); // checked: cannot fail
  }

  py_route_choice route(nb::handle tokens, nb::handle loads, const std::optional<py_extra_keys>& keys) {
    const host_vector<token_id> t = as_int32_vector(tokens, "tokens");
    const std::uint32_t n = router_->options().engines;
    std::vector<double> idle;
    nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu> given;
    std::span<const double> l;
    if (loads.is_none()) {
      idle.assign(n, 0.0);
      l = idle;
    } else {
      const nb::object np = nb::module_::import_("numpy");
      const nb::object arr = np.attr("ascontiguousarray")(loads, nb::arg("dtype") = np.attr("float64"));
      if (nb::cast<std::size_t>(arr.attr("ndim")) != 1 || !nb::try_cast(arr, given, /*convert=*/false))
        raise_message(errc::size_mismatch, "StateRouter.route: size_mismatch: loads must be one load per engine, a "
                                           "1-D array-like of " + std::to_string(n) + " numbers");
      l = {given.data(), given.shape(0)};
    }
    const extra_keys extra = keys ? keys->view() : extra_keys{};
    const result<rt::route_choice> c = router_->route(span_of(t), extra, l);
    if (!c) {
      std::string why;
      if (c.error() == errc::size_mismatch) {
        why = "loads has " + std::to_string(l.size()) + " entries; the router has " + std::to_string(n) +
              " engines (one load per engine)";
      } else {
        for (std::size_t i = 0; i < l.size() && why.empty(); ++i)
          if (!std::isfinite(l[i]) || l[i] < 0)
            why = "loads[" + std::to_string(i) + "] = " + nb::cast<std::string>(nb::str(nb::float_(l[i]))) +
                  ": a load is a non-negative, finite figure";
        if (why.empty()) why = media_problem(extra.media, t.size());
      }
      raise_message(c.error(), "StateRouter.route: " + std::string(to_string(c.error())) + ": " + why);
    }
    return {c->engine, c->usable_tokens, c->best_engine, c->best_usable_tokens, c->redirected_by_load};
  }

  void clear(std::int64_t engine) { check(router_->clear(engine_of(engine, "StateRouter.clear")), "StateRouter.clear"); }

  bool holds(std::int64_t engine, const py_state_event& e) const {
    return router_->holds(engine_of(engine, "StateRouter.holds"), e.event.kind, e.event.key, e.event.exact);
  }
  std::size_t entries(std::int64_t engine) const { return router_->entries(engine_of(engine, "StateRouter.entries")); }

  nb::object usable_tokens() const { return as_int64(router_->usable_tokens()); }
  nb::object matched_tokens() const { return as_int64(router_->matched_tokens()); }

  const rt::router_options& options() const noexcept { return router_->options(); }
  std::size_t memory_bytes() const noexcept { return router_->memory_bytes(); }
  const std::string& policy() const noexcept { return policy_; }
  const nb::object& keys() const noexcept { return keys_; }

private:
  rt::engine_id engine_of(std::int64_t engine, const char* where) const {
    const std::uint32_t n = router_->options().engines;
    if (engine < 0 || engine >= static_cast<std::int64_t>(n))
      raise_message(errc::out_of_range, std::string(where) + ": out_of_range: engine " + std::to_string(engine) +
                                            " is not one of this router's engines, 0 .. " + std::to_string(n - 1));
    return static_cast<rt::engine_id>(engine);
  }

  /// `e` as the router takes it, or the error `apply` would report for it.
  state_event checked(const py_state_event& e, const std::string& what) const {
    if (e.source != 0 && e.source != source_)
      raise_message(errc::invalid_argument,
                    what + " (" + repr(e) + "): invalid_argument: it was computed with other keys (FleetKeys.source " +
                        hex_of(e.source) + ") than this router's (" + hex_of(source_) +
                        "): another fleet seed, model or revision names state differently; give the caches and the "
                        "router the same FleetKeys");
    const errc err = router_->validate(e.event);
    if (err == errc{}) return e.event;
    const rt::router_options& o = router_->options();
    std::string why;
    if (e.event.position == 0) why = "position 0 (a block's end, a snapshot's position, is at least 1)";
    else if (err == errc::misaligned && e.event.kind == state_kind::kv_block)
      why = "a block's end is a multiple of the block size, " + std::to_string(o.block_size);
    else if (err == errc::misaligned)
      why = "a prefill-exact snapshot sits at a multiple of the alignment unit, " + std::to_string(o.alignment);
    else if (e.event.kind == state_kind::snapshot && !o.has_recurrent)
      why = "a snapshot, for a model without recurrent layers";
    else why = "not an event this router takes";
    raise_message(err, what + " (" + repr(e) + "): " + std::string(to_string(err)) + ": " + why);
  }

  static nb::object as_int64(std::span<const std::uint64_t> v) {
    std::vector<std::int64_t> out(v.begin(), v.end()); // token counts are below 2^32
    return owned_array<std::int64_t>(out);
  }

  std::string policy_;
  std::uint64_t source_;                 ///< FleetKeys.source of keys_
  nb::object keys_;                      ///< the FleetKeys, kept alive: ref_ points into it
  std::unique_ptr<state_keys_ref> ref_;  ///< the router keeps a pointer to it
  std::optional<router_type> router_;
};

} // namespace

py_fleet_keys::py_fleet_keys(const model_config& m, std::uint64_t fleet_seed, std::string revision)
    : fleet_seed_(fleet_seed), revision_(std::move(revision)), block_size_(m.block_size()) {
#if REPRISE_PYTHON_HAS_CONTENT_KEYS
  fingerprint_ = value_or_raise(model_fingerprint::make(m, revision_), "FleetKeys: the model's fingerprint");
  keys_.emplace(value_or_raise(routing::fleet_keys::make({fleet_seed, fingerprint_}, m), "FleetKeys"));
  // The root without extra keys digests the seed and the fingerprint: it names this key source.
  const content_key root = keys_->root({});
  if (root == content_key{}) raise(errc::unsupported_config, "FleetKeys: OpenSSL could not compute SHA-256");
  std::memcpy(&source_, root.bytes.data(), sizeof source_);
  if (source_ == 0) source_ = 1; // 0 is a hand-built event's
#else
  raise_message(errc::unsupported_config,
                "FleetKeys: this module was built without OpenSSL (reprise::sha256), which content keys need");
#endif
}

state_keys_ref py_fleet_keys::ref() const noexcept {
#if REPRISE_PYTHON_HAS_CONTENT_KEYS
  return &*keys_;
#else
  return {};
#endif
}

void py_fleet_keys::check_model(const model_config& m, std::string_view where) const {
#if REPRISE_PYTHON_HAS_CONTENT_KEYS
  const auto f = model_fingerprint::make(m, revision_);
  if (f && *f == fingerprint_) return;
#else
  (void)m;
#endif
  raise_message(errc::invalid_argument,
                std::string(where) + ": invalid_argument: these FleetKeys were made for another model (another "
                                     "layout or block size); make them from the same ModelConfig");
}

nb::bytes py_fleet_keys::fingerprint() const {
#if REPRISE_PYTHON_HAS_CONTENT_KEYS
  return nb::bytes(reinterpret_cast<const char*>(fingerprint_.digest.data()), fingerprint_.digest.size());
#else
  return nb::bytes("");
#endif
}

void bind_routing(nb::module_& m) {
  nb::class_<py_fleet_keys>(
      m, "FleetKeys",
      "The content keys of one model and fleet (reprise::routing::fleet_keys, docs/key-format.md): what caches "
      "name the state they report with (PrefixCache(..., state_events=keys)) and what a StateRouter hashes "
      "prompts with. Processes with the same fleet seed, model layout and revision compute the same keys; "
      "events computed with other keys are refused by the router. Needs a module built with OpenSSL.")
      .def(nb::init<const model_config&, std::uint64_t, std::string>(), nb::arg("config"),
           nb::arg("fleet_seed") = 0, nb::arg("revision") = "",
           "`revision` names the weights (and anything else that changes the bytes of the state: quantization, "
           "tensor-parallel layout). Raises UnsupportedConfig in a module built without OpenSSL.")
      .def_prop_ro("fleet_seed", &py_fleet_keys::fleet_seed, "The fleet seed.")
      .def_prop_ro("revision", &py_fleet_keys::revision, "The revision the model's fingerprint digests.")
      .def_prop_ro("block_size", &py_fleet_keys::block_size, "The model's key block size (its KV block size).")
      .def_prop_ro("fingerprint", &py_fleet_keys::fingerprint,
                   "The model's 32-byte fingerprint (its layout and the revision).")
      .def_prop_ro("source", &py_fleet_keys::source,
                   "This key source's identity, as every event computed with it carries it (StateEvent.source): "
                   "64 bits of the root key without extra keys, which digests the seed and the fingerprint.")
      .def("__repr__", [](const py_fleet_keys& k) {
        return "FleetKeys(fleet_seed=" + std::to_string(k.fleet_seed()) + ", revision='" + k.revision() +
               "', source=" + hex_of(k.source()) + ")";
      });

  nb::class_<py_state_event>(
      m, "StateEvent",
      "One report of an engine (reprise::state_event, docs/routing.md): it stored or removed the KV of one full "
      "block ('kv_block': `key` its chain content key, `position` its end) or one snapshot of the recurrent "
      "state ('snapshot': `key` its snapshot key, `parent` the chain key of the block before it, `position` "
      "its position), of exactness class `exactness`. A copy: it stays valid after the cache's next call. "
      "Events pickle (to carry them from an engine's process to the router's), compare and hash by value.")
      .def(
          "__init__",
          [](py_state_event* self, const std::string& change, const std::string& kind, nb::handle key,
             std::uint64_t position, const std::string& exact, nb::handle parent) {
            const state_kind k = kind_of(kind);
            if (k == state_kind::kv_block && !parent.is_none())
              throw nb::value_error("StateEvent: a kv_block event has no parent key");
            if (k == state_kind::snapshot && parent.is_none())
              throw nb::value_error("StateEvent: a snapshot event needs its parent key (the chain key before it)");
            const content_key kk = key_of(key, "StateEvent: key");
            const state_event e =
                k == state_kind::kv_block
                    ? state_event::block(change_of(change), kk, position, exactness_of(exact))
                    : state_event::snapshot(change_of(change), kk, key_of(parent, "StateEvent: parent"), position,
                                            exactness_of(exact));
            new (self) py_state_event{e, 0};
          },
          nb::arg("change"), nb::arg("kind"), nb::arg("key"), nb::arg("position"),
          nb::arg("exactness") = "prefill_exact", nb::arg("parent") = nb::none(),
          nb::sig("def __init__(self, change: str, kind: str, key: bytes, position: int, exactness: str = "
                  "'prefill_exact', parent: bytes | None = None) -> None"),
          "An event built by hand (an engine that reports without a PrefixCache): its `source` is 0, and a "
          "router takes its key on trust. ValueError for an unknown change, kind or exactness, a key that is "
          "not 32 bytes, a snapshot without a parent or a block with one.")
      .def_prop_ro("change", [](const py_state_event& e) { return change_name(e.event.change); },
                   "'stored' (the engine holds it now) or 'removed' (it no longer does).")
      .def_prop_ro("kind", [](const py_state_event& e) { return kind_name(e.event.kind); },
                   "'kv_block' or 'snapshot'.")
      .def_prop_ro("exactness", [](const py_state_event& e) { return exactness_name(e.event.exact); },
                   "'prefill_exact' or 'decode_continuation'.")
      .def_prop_ro("position", [](const py_state_event& e) { return e.event.position; },
                   "A block's end ((i + 1) B for block i), a snapshot's position.")
      .def_prop_ro("key", [](const py_state_event& e) { return bytes_of(e.event.key); },
                   "The 32-byte content key: a block's chain key, a snapshot's snapshot key.")
      .def_prop_ro("parent",
                   [](const py_state_event& e) -> nb::object {
                     if (e.event.kind == state_kind::kv_block) return nb::none();
                     return bytes_of(e.event.parent);
                   },
                   nb::for_getter(nb::sig("def parent(self) -> bytes | None")),
                   "A snapshot's parent: the 32-byte chain key of the block before it (the root's for a snapshot "
                   "in the first block); None for a block.")
      .def_ro("source", &py_state_event::source,
              "FleetKeys.source of the keys the event was computed with; 0 for an event built by hand.")
      .def("__eq__",
           [](const py_state_event& a, nb::handle b) {
             if (!nb::isinstance<py_state_event>(b)) return false;
             const py_state_event& o = nb::cast<const py_state_event&>(b);
             const state_event &x = a.event, &y = o.event;
             return x.change == y.change && x.kind == y.kind && x.exact == y.exact && x.position == y.position &&
                    x.key == y.key && x.parent == y.parent && a.source == o.source;
           },
           nb::sig("def __eq__(self, other: object) -> bool"), "Equal in every field, source included.")
      .def("__hash__",
           [](const py_state_event& e) {
             std::uint64_t h;
             std::memcpy(&h, e.event.key.bytes.data(), sizeof h); // a digest: any 8 bytes hash well
             h ^= e.event.position * 0x9e3779b97f4a7c15ull;
             h ^= (std::uint64_t{static_cast<std::uint8_t>(e.event.change)} << 2) |
                  (std::uint64_t{static_cast<std::uint8_t>(e.event.kind)} << 1) |
                  static_cast<std::uint8_t>(e.event.exact);
             return static_cast<std::int64_t>(h >> 1);
           },
           "A hash of the fields __eq__ compares.")
      .def("__getstate__",
           [](const py_state_event& e) {
             return nb::make_tuple(change_name(e.event.change), kind_name(e.event.kind),
                                   exactness_name(e.event.exact), e.event.position, bytes_of(e.event.key),
                                   bytes_of(e.event.parent), e.source);
           },
           "The event as a tuple of plain values (pickle).")
      .def("__setstate__",
           [](py_state_event& self, const nb::tuple& s) {
             if (nb::len(s) != 7) throw nb::value_error("StateEvent: a pickled state is a tuple of 7 fields");
             state_event e;
             e.change = change_of(nb::cast<std::string>(s[0]));
             e.kind = kind_of(nb::cast<std::string>(s[1]));
             e.exact = exactness_of(nb::cast<std::string>(s[2]));
             e.position = nb::cast<std::uint64_t>(s[3]);
             e.key = key_of(s[4], "StateEvent: key");
             e.parent = key_of(s[5], "StateEvent: parent");
             new (&self) py_state_event{e, nb::cast<std::uint64_t>(s[6])};
           },
           "Restores a pickled event.")
      .def("__repr__", [](const py_state_event& e) { return repr(e); });

  nb::class_<py_route_choice>(m, "RouteChoice",
                              "What StateRouter.route decided (reprise::routing::route_choice).")
      .def_ro("engine", &py_route_choice::engine, "The engine to send the prompt to.")
      .def_ro("usable_tokens", &py_route_choice::usable_tokens,
              "The prefill it would skip there, as the router knows: the engine's admit verifies it, and a "
              "lost event makes it an overestimate (a smaller hit, never a wrong one).")
      .def_ro("best_engine", &py_route_choice::best_engine, "The engine with the most usable tokens, loads aside.")
      .def_ro("best_usable_tokens", &py_route_choice::best_usable_tokens, "best_engine's usable tokens.")
      .def_ro("redirected_by_load", &py_route_choice::redirected_by_load,
              "best_engine was over its load cap, so `engine` is another (with fewer usable tokens).")
      .def("__repr__", [](const py_route_choice& c) {
        return "RouteChoice(engine=" + std::to_string(c.engine) + ", usable_tokens=" + std::to_string(c.usable_tokens) +
               ", best_engine=" + std::to_string(c.best_engine) +
               ", best_usable_tokens=" + std::to_string(c.best_usable_tokens) +
               ", redirected_by_load=" + (c.redirected_by_load ? "True" : "False") + ")";
      });

  nb::class_<py_state_router>(
      m, "StateRouter",
      "Which engine of a fleet should serve a prompt, judged by the prefill each engine would skip "
      "(reprise::routing::state_router, docs/routing.md). Engines report what they store and remove "
      "(PrefixCache(..., state_events=keys).take_state_events()); apply() indexes those reports per engine, "
      "at most entries_per_engine of them, least recently reported first out; route() scores every engine by "
      "the usable prefix a hit there gives (on a hybrid model: every block before a snapshot at exactly that "
      "position) and picks the deepest among the engines under their load cap. It is an estimate: a lost or "
      "late event costs a miss, never a wrong hit, since the engine's cache verifies every hit. No I/O, no "
      "thread; a call that raises has changed nothing.")
      .def(nb::init<const model_config&, const std::string&, const py_fleet_keys&, std::int64_t, double, std::int64_t,
                    std::int64_t>(),
           nb::arg("config"), nb::arg("policy") = "snapshot_turns", nb::kw_only(), nb::arg("keys"),
           nb::arg("engines"), nb::arg("load_slack") = 0.25, nb::arg("entries_per_engine") = 1 << 16,
           nb::arg("max_prompt_tokens") = 1 << 20,
           "A router for `engines` engines whose caches run model `config` with policy `policy` (the names "
           "PrefixCache takes: the policy decides whether decode-continuation state counts) and report with "
           "`keys`. An engine is under its load cap when its load <= (sum of loads + 1) / engines x (1 + "
           "load_slack). Allocates every index: about 128 bytes per entry, engines x entries_per_engine "
           "(memory_bytes). route() looks at the first max_prompt_tokens positions of a prompt. Raises "
           "InvalidArgument (an option out of its range, keys made for another model), ValueError (unknown "
           "policy).")
      .def("apply", &py_state_router::apply, nb::arg("engine"), nb::arg("events"),
           nb::sig("def apply(self, engine: int, events: StateEvent | collections.abc.Iterable[StateEvent]) -> None"),
           "Applies engine `engine`'s reports, one StateEvent or an iterable of them in order: 'stored' holds "
           "the entry as the most recently reported (evicting the engine's least recently reported one when it "
           "holds entries_per_engine), 'removed' drops it. Delivering an event twice changes nothing. Checks "
           "every event before applying any. Raises OutOfRange (no such engine), InvalidArgument (an event "
           "computed with other keys; position 0; a snapshot for a model without recurrent layers), "
           "Misaligned (a block end off the block grid, a prefill-exact snapshot off the alignment unit), "
           "TypeError (not a StateEvent).")
      .def("route", &py_state_router::route, nb::arg("tokens"), nb::arg("loads") = nb::none(),
           nb::arg("extra_keys") = nb::none(),
           nb::sig("def route(self, tokens: numpy.typing.ArrayLike, loads: numpy.typing.ArrayLike | None = None, "
                   "extra_keys: ExtraKeys | None = None) -> RouteChoice"),
           "Chooses the engine for prompt `tokens` (int32 array-like) under `extra_keys` (as PrefixCache.admit "
           "takes them); `loads[e]` is engine e's load (queued requests, queued prefill tokens in thousands: "
           "any unit in which 1 is a small amount of work), None for an idle fleet. The engine under its load "
           "cap with the most usable tokens wins; ties go to the lower load, then the lower index. Returns a "
           "RouteChoice. Raises SizeMismatch (not one load per engine), InvalidArgument (a negative, infinite "
           "or NaN load; media items out of order, at one position twice, or with a digest over 32 bytes; "
           "OutOfRange: a media item past the prompt's end).")
      .def("clear", &py_state_router::clear, nb::arg("engine"),
           "Forgets everything engine `engine` reported (it restarted, or lost its state): it scores 0 until "
           "it reports again. Raises OutOfRange.")
      .def("holds", &py_state_router::holds, nb::arg("engine"), nb::arg("event"),
           "Whether engine `engine`'s index holds the entry `event` names (kind, key, exactness; its change "
           "aside). Raises OutOfRange.")
      .def("entries", &py_state_router::entries, nb::arg("engine"),
           "The entries engine `engine`'s index holds (at most entries_per_engine). Raises OutOfRange.")
      .def("usable_tokens", &py_state_router::usable_tokens,
           nb::sig("def usable_tokens(self) -> numpy.typing.NDArray[numpy.int64]"),
           "Per engine, the usable tokens the last route() scored (zeros before the first), a copy.")
      .def("matched_tokens", &py_state_router::matched_tokens,
           nb::sig("def matched_tokens(self) -> numpy.typing.NDArray[numpy.int64]"),
           "Per engine, the KV-matched tokens the last route() scored: B times the leading prompt blocks it "
           "holds. On a hybrid model the difference to usable_tokens() is what a missing snapshot costs.")
      .def_prop_ro("engines", [](const py_state_router& r) { return r.options().engines; }, "Engines, 0 .. engines - 1.")
      .def_prop_ro("policy", &py_state_router::policy, "The policy name as given.")
      .def_prop_ro("keys", &py_state_router::keys,
                   nb::for_getter(nb::sig("def keys(self) -> FleetKeys")), "The FleetKeys it hashes prompts with.")
      .def_prop_ro("accept_decode_continuation",
                   [](const py_state_router& r) { return r.options().accept_decode_continuation; },
                   "Whether decode-continuation blocks and snapshots count (the policy accepts them).")
      .def_prop_ro("has_recurrent", [](const py_state_router& r) { return r.options().has_recurrent; },
                   "A hybrid model: a prompt skips only up to a snapshot.")
      .def_prop_ro("block_size", [](const py_state_router& r) { return r.options().block_size; },
                   "The model's key block size.")
      .def_prop_ro("alignment", [](const py_state_router& r) { return r.options().alignment; },
                   "The model's alignment unit: prefill-exact snapshots sit at its multiples.")
      .def_prop_ro("load_slack", [](const py_state_router& r) { return r.options().load_slack; },
                   "How far above an even share of the load an engine may be and still be chosen.")
      .def_prop_ro("entries_per_engine", [](const py_state_router& r) { return r.options().entries_per_engine; },
                   "The most entries (blocks and snapshots) the index keeps per engine.")
      .def_prop_ro("max_prompt_tokens", [](const py_state_router& r) { return r.options().max_prompt_tokens; },
                   "The prompt positions route() looks at.")
      .def_prop_ro("memory_bytes", &py_state_router::memory_bytes, "The bytes the indexes allocated (fixed).")
      .def("__repr__", [](const py_state_router& r) {
        std::string entries;
        for (std::uint32_t e = 0; e < r.options().engines; ++e)
          entries.append(e == 0 ? "" : ", ").append(std::to_string(r.entries(e)));
        return "StateRouter(policy='" + r.policy() + "', engines=" + std::to_string(r.options().engines) +
               ", entries=[" + entries + "])";
      });
}

} // namespace reprise::python
