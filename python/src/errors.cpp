// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
/// \file
/// Every `reprise::errc` as a Python exception class named after it (`pool_exhausted` -> `PoolExhausted`),
/// all deriving from `reprise.Error`. The argument-like ones also derive from `ValueError`, so callers that
/// already catch `ValueError` for bad input keep working. Each class carries `errc` (the stable name) and
/// `code` (the stable number) as class attributes.

#include "bindings.hpp"

#include <array>
#include <string>

namespace reprise::python {
namespace {

struct error_kind {
  errc code;
  const char* class_name;
  bool value_error;
  const char* doc;
};

// Docs repeat errc.hpp's one-line meanings: they are what a Python user reads in the message.
constexpr std::array<error_kind, 15> kinds{{
    {errc::invalid_argument, "InvalidArgument", true, "a size, count or option is out of its documented range"},
    {errc::size_mismatch, "SizeMismatch", true, "a buffer or token span has the wrong length for the call"},
    {errc::misaligned, "Misaligned", true,
     "a position or interval is off its grid (the model's alignment unit; for chat's capture offsets, the block size)"},
    {errc::unsupported_config, "UnsupportedConfig", true,
     "the sizes match no kernel instantiation or model shape, or the policy, tiers and options do not fit the model"},
    {errc::pool_exhausted, "PoolExhausted", false, "every block or slot is referenced; nothing was allocated"},
    {errc::budget_too_small, "BudgetTooSmall", true, "a byte budget cannot hold even one unit (e.g. one snapshot)"},
    {errc::unknown_sequence, "UnknownSequence", false, "the sequence id was never admitted or was already released"},
    {errc::duplicate_sequence, "DuplicateSequence", false, "the sequence id is already live"},
    {errc::double_release, "DoubleRelease", false, "the block, slot or sequence was already released"},
    {errc::out_of_range, "OutOfRange", true, "an index (slot, block, layer, position) is outside its pool or sequence"},
    {errc::overlapping_pairs, "OverlappingPairs", true,
     "a copy list names one destination twice or reads a slot another pair writes"},
    {errc::device_error, "DeviceError", false, "the CUDA runtime reported an error"},
    {errc::no_device, "NoDevice", false, "a device call was made but no CUDA device is present"},
    {errc::invariant_violated, "InvariantViolated", false,
     "check_invariants() found inconsistent bookkeeping (a bug, never bad input)"},
    {errc::unwritten_blocks, "UnwrittenBlocks", false,
     "a block shared within a step (share_in_step) is not written by its writer"},
}};

// The classes live as long as the module (the module's attributes hold references too); indexed by errc value.
std::array<PyObject*, 16> classes{};

const error_kind* find(errc e) noexcept {
  for (const error_kind& k : kinds)
    if (k.code == e) return &k;
  return nullptr;
}

} // namespace

void raise(errc e, std::string_view where) {
  const auto v = static_cast<std::size_t>(e);
  const error_kind* k = find(e);
  PyObject* cls = v < classes.size() && classes[v] ? classes[v] : classes[0];
  std::string msg(where);
  msg += ": ";
  msg += to_string(e);
  if (k) {
    msg += " (";
    msg += k->doc;
    msg += ")";
  }
  PyErr_SetString(cls, msg.c_str());
  throw nb::python_error();
}

void raise_message(errc e, const std::string& message) {
  const auto v = static_cast<std::size_t>(e);
  PyObject* cls = v < classes.size() && classes[v] ? classes[v] : classes[0];
  PyErr_SetString(cls, message.c_str());
  throw nb::python_error();
}

void bind_errors(nb::module_& m) {
  PyObject* base = PyErr_NewExceptionWithDoc(
      "reprise._reprise.Error",
      "Base class of every error a Reprise call reports. A call that raises has changed nothing: the cache, "
      "its metrics and every output buffer are as they were. `errc` is the stable error name, `code` its "
      "stable number (reprise::errc in C++).",
      PyExc_Exception, nullptr);
  if (!base) throw nb::python_error();
  classes[0] = base;
  m.attr("Error") = nb::steal(base);
  nb::dict all;
  for (const error_kind& k : kinds) {
    const std::string qualified = std::string("reprise._reprise.") + k.class_name;
    const std::string doc = std::string("reprise::errc::") + std::string(to_string(k.code)) + ": " + k.doc + ".";
    nb::object bases = k.value_error ? nb::object(nb::make_tuple(nb::handle(base), nb::handle(PyExc_ValueError)))
                                     : nb::borrow(base);
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc.c_str(), bases.ptr(), nullptr);
    if (!cls) throw nb::python_error();
    nb::object owned = nb::steal(cls);
    owned.attr("errc") = nb::str(to_string(k.code).data(), to_string(k.code).size());
    owned.attr("code") = static_cast<int>(k.code);
    classes[static_cast<std::size_t>(k.code)] = cls;
    m.attr(k.class_name) = owned;
    all[nb::str(to_string(k.code).data(), to_string(k.code).size())] = owned;
  }
  m.attr("ERRORS") = all;
}

} // namespace reprise::python
