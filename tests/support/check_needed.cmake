# Fails when the shared library LIBRARY lists a dynamic dependency matching PATTERN (readelf -d):
# libxgrad itself must not need the libraries that its dlopen'ed parts bring (the CUDA backend's
# CUDA and OpenMP libraries, the MPI plugin's MPI library). WHAT names them for the message.
execute_process(COMMAND readelf -d "${LIBRARY}" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIBRARY} failed (${rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${out}")
foreach(line IN LISTS needed)
  if(line MATCHES "${PATTERN}")
    message(FATAL_ERROR "${LIBRARY} needs ${line}: it should load without ${WHAT}")
  endif()
endforeach()
message(STATUS "${LIBRARY} needs none of: ${PATTERN}")
