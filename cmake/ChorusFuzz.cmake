# chorus_add_fuzzer(NAME <target> SOURCES <files>... CORPUS <glob of seeds>
#                   [LIBS <libs>...] [INCLUDES <dirs>...])
# A libFuzzer target (clang sanitizer builds only: make test-asan, make fuzz),
# its seeds copied to a scratch corpus (libFuzzer adds what it finds there), and
# a short run of it in the `core` tests. The smoke run's seed is fixed, so a
# failure in CI is the same failure here (`make fuzz` searches with fresh seeds).
function(chorus_add_fuzzer)
  cmake_parse_arguments(FUZZ "" "NAME;CORPUS" "SOURCES;LIBS;INCLUDES" ${ARGN})
  if(NOT (CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND CHORUS_SANITIZE))
    return()
  endif()
  add_executable(${FUZZ_NAME} ${FUZZ_SOURCES})
  target_include_directories(${FUZZ_NAME} PRIVATE ${FUZZ_INCLUDES})
  target_compile_options(${FUZZ_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_options(${FUZZ_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${FUZZ_NAME} PRIVATE ${FUZZ_LIBS})
  set(corpus "${PROJECT_BINARY_DIR}/fuzz-corpus/${FUZZ_NAME}")
  file(MAKE_DIRECTORY "${corpus}")
  file(GLOB seeds ${FUZZ_CORPUS})
  file(COPY ${seeds} DESTINATION "${corpus}")
  add_test(NAME ${FUZZ_NAME}_smoke
    COMMAND ${FUZZ_NAME} -seed=1 -max_total_time=20 -rss_limit_mb=4096 -timeout=10
            -artifact_prefix=${PROJECT_BINARY_DIR}/fuzz-${FUZZ_NAME}- "${corpus}")
  set_tests_properties(${FUZZ_NAME}_smoke PROPERTIES LABELS core TIMEOUT 120)
  set_property(GLOBAL APPEND PROPERTY CHORUS_FUZZERS ${FUZZ_NAME})
endfunction()
