// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
/// \file
/// The extension module `reprise._reprise` and the array conversions its calls share.

#include "bindings.hpp"

#include <nanobind/stl/string.h>

#include <limits>
#include <string>
#include <type_traits>

namespace reprise::python {
namespace {

// numpy, imported once and kept for the life of the process (never released: module-level objects must not
// be destroyed after the interpreter is finalized).
nb::handle numpy() {
  static PyObject* np = [] {
    nb::object mod = nb::module_::import_("numpy");
    return mod.release().ptr();
  }();
  return np;
}

template <class T>
const char* dtype_name() {
  if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else if constexpr (std::is_signed_v<T>) return "int32";
  else return "uint32";
}

template <class T>
host_vector<T> as_vector(nb::handle obj, const char* what) {
  host_vector<T> out;
  if (nb::try_cast(obj, out, /*convert=*/false)) return out; // already T and contiguous: no copy
  nb::object arr = numpy().attr("asarray")(obj);
  if (nb::cast<std::size_t>(arr.attr("ndim")) != 1)
    throw nb::value_error((std::string(what) + " must be one-dimensional").c_str());
  if (nb::cast<std::size_t>(arr.attr("size")) == 0) {
    arr = numpy().attr("zeros")(0, nb::arg("dtype") = numpy().attr(dtype_name<T>()));
  } else {
    const std::string kind = nb::cast<std::string>(arr.attr("dtype").attr("kind"));
    if (kind != "i" && kind != "u")
      throw nb::type_error((std::string(what) + " must hold integers, got dtype " +
                            nb::cast<std::string>(arr.attr("dtype").attr("name")))
                               .c_str());
    // Range check before narrowing (two C reductions); a value that does not fit is an error, not a wrap.
    long long lo = 0, hi = 0;
    if (!nb::try_cast(arr.attr("min")(), lo) || !nb::try_cast(arr.attr("max")(), hi) ||
        lo < static_cast<long long>(std::numeric_limits<T>::min()) ||
        hi > static_cast<long long>(std::numeric_limits<T>::max())) {
      const std::string msg = std::string(what) + " holds values outside the range of " +
                              dtype_name<T>();
      PyErr_SetString(PyExc_OverflowError, msg.c_str());
      throw nb::python_error();
    }
    arr = numpy().attr("ascontiguousarray")(arr, nb::arg("dtype") = numpy().attr(dtype_name<T>()));
  }
  if (!nb::try_cast(arr, out, /*convert=*/false))
    throw nb::type_error((std::string(what) + ": cannot read as a contiguous host array").c_str());
  return out;
}

} // namespace

host_vector<std::int32_t> as_int32_vector(nb::handle obj, const char* what) {
  return as_vector<std::int32_t>(obj, what);
}
host_vector<std::uint32_t> as_uint32_vector(nb::handle obj, const char* what) {
  return as_vector<std::uint32_t>(obj, what);
}
host_vector<std::int64_t> as_int64_vector(nb::handle obj, const char* what) {
  return as_vector<std::int64_t>(obj, what);
}

} // namespace reprise::python

NB_MODULE(_reprise, m) {
  using namespace reprise::python;
  m.doc() = "Reprise: prefix caching for hybrid attention / recurrent LLMs (the compiled core of `reprise`).";
  m.attr("__version__") = nb::str("0.1.0");
  bind_errors(m);
  bind_model(m);
  bind_cache(m);
  bind_routing(m);
#if defined(REPRISE_PYTHON_HAS_OPS)
  nb::module_ ops = m.def_submodule("ops", "Host implementations of the state kernels on numpy arrays (float32; "
                                          "bfloat16 and float16 where the kernels take them).");
  bind_ops(ops);
  m.attr("HAS_OPS") = true;
#else
  m.attr("HAS_OPS") = false;
#endif
}
