// chorus-run SCRIPT [ARGS...]: runs a Python script in a chorus interpreter,
// with chorus' runtime (torch.classes.chorus.*: communicators, archives)
// available, as plain `python SCRIPT` would. Exit status 0 on success, 1 if
// the script raised (the traceback goes to stderr).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "chorus/interpreter/interpreter_manager.h"

int main(int argc, char** argv) {
  CLI::App app{"chorus-run: run a Python script inside a chorus interpreter"};
  std::string script;
  std::vector<std::string> args;
  app.add_option("script", script, "the Python script")->required();
  app.add_option("args", args, "arguments for the script (sys.argv[1:])");
  app.allow_extras(false);
  CLI11_PARSE(app, argc, argv);

  chorus::InterpreterManagerOptions options;
  options.num_interpreters = 1;
  auto manager = chorus::InterpreterManager::Create(options);
  if (!manager.ok()) {
    std::fprintf(stderr, "chorus-run: %s\n", manager.status().ToString().c_str());
    return 1;
  }
  chorus::InterpreterSession session = (*manager)->Acquire(0);
  std::string argv_list = "['" + script + "'";
  for (const std::string& arg : args) argv_list += ", '" + arg + "'";
  argv_list += "]";
  chorus::Status status =
      session.Exec("import runpy, sys\nsys.argv = " + argv_list +
                   "\nsys.path.insert(0, __import__('os').path.dirname(sys.argv[0]) or '.')\n"
                   "runpy.run_path(sys.argv[0], run_name='__main__')\n");
  if (!status.ok()) {
    const chorus::PythonError* error = status.python_error();
    std::fprintf(stderr, "%s", error ? error->traceback.c_str() : status.ToString().c_str());
    return 1;
  }
  return 0;
}
