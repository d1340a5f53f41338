// Shared helpers for chorus benchmarks: side-by-side rounds, medians, process
// facts and the JSON result file.
//
// This machine is noisy, so benchmarks never report a lone absolute time as a
// result: they run the compared modes in interleaved rounds and report ratios
// of medians measured in the same run.
#ifndef CHORUS_TESTS_BENCH_BENCH_UTIL_H_
#define CHORUS_TESTS_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "chorus/common/process_stats.h"

namespace chorus::bench {

// The options every benchmark takes: --out (its JSON result), --rounds
// (interleaved rounds of each comparison) and, when `cache` is not null,
// --cache (the interpreters' library cache). The variables hold the defaults.
inline void AddCommonOptions(CLI::App& app, std::string* out, int* rounds,
                             std::string* cache = nullptr) {
  app.add_option("--out", *out, "where to write the JSON result");
  app.add_option("--rounds", *rounds, "interleaved rounds per comparison");
  if (cache != nullptr) app.add_option("--cache", *cache, "library cache directory");
}

inline double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2.0;
}

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The JSON object a child process printed as its last line starting with '{'
// (logs may come before it).
inline nlohmann::json LastJsonLine(const std::string& output) {
  size_t start = output.rfind("\n{");
  start = start == std::string::npos ? output.find('{') : start + 1;
  if (start == std::string::npos) throw std::runtime_error("no JSON in: " + output);
  return nlohmann::json::parse(output.substr(start));
}

// Resident memory of this process by mapping, in MiB (from /proc/self/smaps):
// the mapped file's path, or "[anonymous]" for heap, stacks and anonymous maps.
inline std::map<std::string, double> ResidentMiBByMapping() {
  std::ifstream smaps("/proc/self/smaps");
  std::map<std::string, double> by_mapping;
  std::string line, current = "[anonymous]";
  while (std::getline(smaps, line)) {
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (first == "Rss:") {
      double kib = 0;
      fields >> kib;
      by_mapping[current] += kib / 1024.0;
    } else if (first.find('-') != std::string::npos && first.back() != ':') {
      // A mapping header: "start-end perms offset dev inode [path]".
      std::string perms, offset, device, inode, path;
      fields >> perms >> offset >> device >> inode >> path;
      current = path.empty() || path[0] == '[' ? "[anonymous]" : path;
    }
  }
  return by_mapping;
}

// Proportional set size of this process in MiB (/proc/self/smaps_rollup's
// Pss): pages it shares with other processes, or maps more than once itself,
// count once in all. RSS counts a page once per mapping of it.
inline double ProportionalMiB() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string key;
  double kib = 0;
  while (rollup >> key) {
    if (key == "Pss:" && rollup >> kib) return kib / 1024.0;
    rollup.ignore(1 << 12, '\n');
  }
  return 0.0;
}

// Runs `command` through the shell and returns its standard output. Throws
// when it cannot run or exits with a failure.
inline std::string RunCapture(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  if (!pipe || pclose(pipe) != 0) throw std::runtime_error("failed: " + command);
  return output;
}

// Writes a chorus archive at `path` once (kept for later runs): runs the Python
// `script` (given the archive's path as argv[1]) with `python` and chorus'
// Python package from `python_dir`. The archive is written in a scratch
// folder under its final name `name`.pt (torch names the archive's top folder
// after the file), then moved into place. Throws when the script fails.
inline void EnsureArchive(const std::string& path, const std::string& python,
                          const std::string& python_dir, const std::string& script,
                          const std::string& name) {
  if (std::ifstream(path).good()) return;
  std::ofstream(path + ".py") << script;
  const std::string scratch = path + ".tmp/" + name + ".pt";
  RunCapture("mkdir -p " + path + ".tmp && PYTHONPATH=" + python_dir + " " + python + " " + path +
             ".py " + scratch + " && mv " + scratch + " " + path + " && rm -r " + path + ".tmp");
}

// Runs each mode once per round, `rounds` times, interleaved, and returns
// what each run returned, per mode.
inline std::vector<std::vector<double>> InterleavedSamples(
    int rounds, const std::vector<std::function<double()>>& modes) {
  std::vector<std::vector<double>> samples(modes.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t m = 0; m < modes.size(); ++m) samples[m].push_back(modes[m]());
  }
  return samples;
}

// InterleavedSamples' per-mode medians.
inline std::vector<double> InterleavedMedians(int rounds,
                                              const std::vector<std::function<double()>>& modes) {
  std::vector<std::vector<double>> samples = InterleavedSamples(rounds, modes);
  std::vector<double> medians;
  for (auto& s : samples) medians.push_back(Median(s));
  return medians;
}

// Writes `result` to `path` (creating its directory) and says where.
inline bool WriteJson(const std::string& path, const nlohmann::json& result) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos) {
    std::string dir = path.substr(0, slash);
    std::string command = "mkdir -p '" + dir + "'";
    if (std::system(command.c_str()) != 0) return false;
  }
  std::ofstream out(path);
  out << result.dump(2) << "\n";
  std::printf("wrote %s\n", path.c_str());
  return static_cast<bool>(out);
}

}  // namespace chorus::bench

#endif  // CHORUS_TESTS_BENCH_BENCH_UTIL_H_
