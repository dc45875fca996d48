# Fails when the shared library LIBRARY lists a dynamic dependency matching PATTERN (readelf -d):
# libxgrad itself must not need the CUDA or OpenMP libraries its backend library brings.
execute_process(COMMAND readelf -d "${LIBRARY}" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIBRARY} failed (${rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${out}")
foreach(line IN LISTS needed)
  if(line MATCHES "${PATTERN}")
    message(FATAL_ERROR "${LIBRARY} needs ${line}: it should load without the CUDA backend's libraries")
  endif()
endforeach()
message(STATUS "${LIBRARY} needs none of: ${PATTERN}")
