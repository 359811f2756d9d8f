// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The doctest runner shared by every host test binary.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
