// The models bench_serve serves: packaged with chorus-package into a fresh
// repository (trivial, heavy, mlp, row_sums, trivial_cached, calls_trivial).
#ifndef CHORUS_TESTS_BENCH_SERVE_MODELS_H_
#define CHORUS_TESTS_BENCH_SERVE_MODELS_H_

#include <string>

namespace chorus::bench {

// Makes `relative` (emptied first) with the models' source and a repository
// of them under it, packaged with `bin`/chorus-package; returns the
// repository's absolute path. Throws std::runtime_error when packaging fails.
std::string MakeRepository(const std::string& relative, const std::string& bin);

}  // namespace chorus::bench

#endif  // CHORUS_TESTS_BENCH_SERVE_MODELS_H_
