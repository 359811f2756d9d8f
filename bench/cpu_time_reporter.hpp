// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// A console reporter that also keeps each run's CPU time by run name, for the ratios a benchmark binary prints
// at the end (CPU time: the machines are shared, so wall time waits on other processes).

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace reprise::bench {

class cpu_time_reporter : public benchmark::ConsoleReporter {
public:
  /// One time per configuration: the run itself, or with --benchmark_repetitions the median of the runs.
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const bool single = r.run_type == Run::RT_Iteration && r.repetitions <= 1;
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (single || median) times_[r.run_name.str()] = r.GetAdjustedCPUTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }

  /// CPU time of run `name` ("BM_probe/8192"), or 0 when it did not run.
  double time(const std::string& name) const {
    const auto it = times_.find(name);
    return it == times_.end() ? 0.0 : it->second;
  }
  const std::map<std::string, double>& times() const noexcept { return times_; }

private:
  std::map<std::string, double> times_;
};

} // namespace reprise::bench
