// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise::errc and result<T>.
#include <reprise/errc.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <system_error>

using namespace reprise;

TEST_CASE("errc converts to std::error_code with a readable message") {
  std::error_code ec = errc::pool_exhausted;
  CHECK(ec.category().name() == std::string("reprise"));
  CHECK(ec.message() == "pool_exhausted");
  CHECK(ec == make_error_code(errc::pool_exhausted));
  CHECK(ec != make_error_code(errc::misaligned));
  for (int v = 1; v <= static_cast<int>(errc::unwritten_blocks); ++v)
    CHECK(to_string(static_cast<errc>(v)) != "unknown_error");
}

TEST_CASE("result<T> holds a value or an error") {
  result<int> ok = 42;
  CHECK(ok.has_value());
  CHECK(*ok == 42);
  CHECK(ok.value_or(7) == 42);
  result<int> bad = failure{errc::out_of_range};
  CHECK_FALSE(bad.has_value());
  CHECK(bad.error() == errc::out_of_range);
  CHECK(bad.value_or(7) == 7);

  SUBCASE("non-trivial values are copied, moved and destroyed exactly once") {
    auto p = std::make_shared<int>(5);
    {
      result<std::shared_ptr<int>> a = p;
      result<std::shared_ptr<int>> b = a;
      CHECK(p.use_count() == 3);
      result<std::shared_ptr<int>> c = std::move(b);
      CHECK(p.use_count() == 3);
      c = failure{errc::invalid_argument};
      CHECK(p.use_count() == 2);
      c = a;
      CHECK(p.use_count() == 3);
    }
    CHECK(p.use_count() == 1);
  }
  SUBCASE("result<void>") {
    result<void> v;
    CHECK(v.has_value());
    result<void> e = errc::double_release;
    CHECK(e.error() == errc::double_release);
  }
}
