# Facts about the Python that chorus embeds. CHORUS_PYTHON pins it (the Makefile
# passes PYTHON); everything else is asked of that Python.
set(CHORUS_PYTHON "/usr/bin/python3" CACHE FILEPATH "Python that imports torch; chorus embeds it")

execute_process(
  COMMAND "${CHORUS_PYTHON}" "${PROJECT_SOURCE_DIR}/tools/python_facts.py"
  OUTPUT_VARIABLE _facts
  ERROR_VARIABLE _facts_error
  RESULT_VARIABLE _facts_result)
if(NOT _facts_result EQUAL 0)
  message(FATAL_ERROR "${CHORUS_PYTHON} cannot describe itself (does it import torch?):\n${_facts_error}")
endif()
string(REPLACE "\n" ";" _facts "${_facts}")
foreach(_line IN LISTS _facts)
  if(_line MATCHES "^([A-Z_]+)=(.*)$")
    set(CHORUS_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  endif()
endforeach()
set(CHORUS_LIBPYTHON "${CHORUS_PY_LIBPYTHON}")
message(STATUS "chorus embeds Python ${CHORUS_PY_VERSION} (${CHORUS_PYTHON}), torch ${CHORUS_TORCH_VERSION}")
