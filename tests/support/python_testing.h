// Test support: running code with the Python chorus embeds (the pinned venv)
// and chorus' Python package on its path, as the tests' packaging steps do,
// and an interpreter for a test suite. Needs the compile definitions
// CHORUS_PYTHON and CHORUS_PYTHON_DIR.
#ifndef CHORUS_TESTS_SUPPORT_PYTHON_TESTING_H_
#define CHORUS_TESTS_SUPPORT_PYTHON_TESTING_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "chorus/common/file_util.h"
#include "chorus/interpreter/interpreter_manager.h"

namespace chorus::testing {

// Paths fixed at build time, or where the environment says for a relocated
// build (tools/device_bundle/env.sh sets these on another machine).
inline std::string BuiltOrEnvironment(const char* name, const char* built) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : built;
}
// The pinned Python and chorus' Python package.
inline std::string PinnedPython() { return BuiltOrEnvironment("CHORUS_PYTHON", CHORUS_PYTHON); }
inline std::string PythonPackageDir() {
  return BuiltOrEnvironment("CHORUS_PYTHON_DIR", CHORUS_PYTHON_DIR);
}
#ifdef CHORUS_SOURCE_DIR
// The source tree (test data, examples).
inline std::string SourceDir() {
  return BuiltOrEnvironment("CHORUS_SOURCE_DIR", CHORUS_SOURCE_DIR);
}
#endif

// A scratch folder of this process under the working directory
// (test-work/<name>-<pid>): ctest runs a file's tests as concurrent processes.
inline std::string ProcessWorkDir(const std::string& name) {
  return std::filesystem::current_path().string() + "/test-work/" + name + "-" +
         std::to_string(::getpid());
}

// Writes `code` to `script` and runs it; returns the exit status (-1 if the
// script cannot be written).
inline int RunPinnedPython(const std::string& code, const std::string& script) {
  if (!WriteFileAtomically(script, code).ok()) return -1;
  const std::string command =
      "PYTHONPATH=" + PythonPackageDir() + " " + PinnedPython() + " " + script;
  return std::system(command.c_str());
}

// Runs `code` (no single quotes) with `argument` as sys.argv[1]; returns what
// it printed (stdout and stderr) and sets `*exit_status`.
inline std::string RunPinnedPythonCode(const std::string& code, int* exit_status,
                                       const std::string& argument = "") {
  const std::string command = "PYTHONPATH=" + PythonPackageDir() + " " + PinnedPython() + " -c '" +
                              code + "' '" + argument + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  while (pipe != nullptr && std::fgets(buffer, sizeof(buffer), pipe)) out += buffer;
  *exit_status = pipe == nullptr ? -1 : ::pclose(pipe);
  return out;
}

// One interpreter with its library cache in `cache_dir`, for a test suite to
// keep (released: suites hold it in a static and delete it in TearDownTestSuite).
inline StatusOr<InterpreterManager*> OneInterpreter(const std::string& cache_dir) {
  InterpreterManagerOptions options;
  options.num_interpreters = 1;
  options.cache_dir = cache_dir;
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<InterpreterManager> manager,
                          InterpreterManager::Create(options));
  return manager.release();
}

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_SUPPORT_PYTHON_TESTING_H_
