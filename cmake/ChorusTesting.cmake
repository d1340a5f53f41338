# chorus_add_test(NAME name SOURCES ... LIBS ... [LABELS ...] [TIMEOUT seconds])
# A GoogleTest binary in bin/tests and one CTest entry that runs it whole.
#
# Whole, not test by test: a suite's fixture (interpreters with torch, a
# packaged model) is made once in SetUpTestSuite and shared by its tests, where
# one process per test made it again for every test (about 600 s of the main
# ctest run went to that, against 180 s whole). One test alone:
# bin/tests/<name> --gtest_filter=Suite.Test.
function(chorus_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gmock GTest::gtest GTest::gtest_main)
  # Tests may use private headers and tests/support/ (paths from the root).
  target_include_directories(${T_NAME} PRIVATE "${PROJECT_SOURCE_DIR}")
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/bin/tests")
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} WORKING_DIRECTORY "${PROJECT_BINARY_DIR}")
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
endfunction()
