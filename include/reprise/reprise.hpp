// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Umbrella header: the whole host library.

#include <reprise/config.hpp>
#include <reprise/dtype.hpp>
#include <reprise/errc.hpp>
#include <reprise/state/concepts.hpp>
#include <reprise/state/hybrid_model.hpp>
#include <reprise/state/kinds.hpp>
#include <reprise/state/model_config.hpp>
#include <reprise/state/model_facts.hpp>
#include <reprise/state/presets.hpp>
#include <reprise/state/shapes.hpp>
