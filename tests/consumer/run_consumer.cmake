# cmake -P script behind the `install_consumer` test (see CMakeLists.txt next to it).
#
#   1. cmake --install <XGRAD_BINARY_DIR> --prefix <WORK_DIR>/prefix, and check that the libraries
#      libxgrad loads at run time (PLUGINS) lie beside it
#   2. configure + build CONSUMER_SOURCE_DIR in <WORK_DIR>/build with CMAKE_PREFIX_PATH=<prefix>,
#      the same generator, C++ compiler, flags and build type as xgrad's own build
#   3. run the consumer executable
#   4. the same for the tutorial's project (docs/tutorial, TUTORIAL_SOURCE_DIR): configure, build,
#      and train it for one epoch on the first 512 images of TUTORIAL_DATA_DIR when that folder
#      holds the Fashion-MNIST files (otherwise it is only built, and the test says so)
#
# Any failing step fails the script (and the test) with that step's command and output.
cmake_minimum_required(VERSION 3.20)

foreach(var XGRAD_BINARY_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")

# Start from nothing, so a stale install or cache can never make the test pass.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# run_step(<description> <command>...): run, echo the command, fail with its output on error.
function(run_step what)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "[install_consumer] ${what}: ${shown}")
  execute_process(COMMAND ${ARGN}
    WORKING_DIRECTORY "${WORK_DIR}"
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR
      "[install_consumer] FAILED: ${what} (exit status: ${rc})\n"
      "command: ${shown}\n"
      "---- output ----\n${out}\n---- end of output ----")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(config_args "")
if(DEFINED CONFIG AND NOT CONFIG STREQUAL "")
  set(config_args --config "${CONFIG}")
endif()

# 1. Install.
run_step("install xgrad" "${CMAKE_COMMAND}" --install "${XGRAD_BINARY_DIR}" --prefix "${prefix}" ${config_args})

# The exported target names each include directory once (a repeated one costs every consumer's
# compile command a duplicate -I, and said that two install rules added it).
file(GLOB_RECURSE targets_files "${prefix}/*/xgradTargets.cmake")
foreach(targets_file IN LISTS targets_files)
  file(STRINGS "${targets_file}" include_lines REGEX "INTERFACE_INCLUDE_DIRECTORIES")
  foreach(line IN LISTS include_lines)
    string(REGEX REPLACE ".*INTERFACE_INCLUDE_DIRECTORIES \"([^\"]*)\".*" "\\1" dirs "${line}")
    set(unique ${dirs})
    list(REMOVE_DUPLICATES unique)
    if(NOT unique STREQUAL dirs)
      message(FATAL_ERROR "[install_consumer] FAILED: ${targets_file} lists an include directory more "
                          "than once: ${dirs}")
    endif()
  endforeach()
endforeach()

# The libraries libxgrad loads when first used (PLUGINS, comma-separated file names) lie beside
# it, where it looks for them first.
if(DEFINED PLUGINS AND NOT PLUGINS STREQUAL "")
  file(GLOB_RECURSE libxgrad_files "${prefix}/*/libxgrad.so")
  if(NOT libxgrad_files)
    message(FATAL_ERROR "[install_consumer] FAILED: the install holds no libxgrad.so")
  endif()
  list(GET libxgrad_files 0 libxgrad_file)
  get_filename_component(libdir "${libxgrad_file}" DIRECTORY)
  string(REPLACE "," ";" plugins "${PLUGINS}")
  foreach(plugin IN LISTS plugins)
    if(NOT EXISTS "${libdir}/${plugin}")
      message(FATAL_ERROR "[install_consumer] FAILED: ${plugin} is not installed beside libxgrad, in ${libdir}")
    endif()
  endforeach()
endif()

# 2. Configure and build the consumer project against the fresh prefix only.
set(configure_args
  -G "${GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  # Never pick up an xgrad from the user package registry or a system install instead.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(DEFINED GENERATOR_PLATFORM AND NOT GENERATOR_PLATFORM STREQUAL "")
  list(APPEND configure_args -A "${GENERATOR_PLATFORM}")
endif()
if(DEFINED GENERATOR_TOOLSET AND NOT GENERATOR_TOOLSET STREQUAL "")
  list(APPEND configure_args -T "${GENERATOR_TOOLSET}")
endif()
if(DEFINED MAKE_PROGRAM AND NOT MAKE_PROGRAM STREQUAL "")
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(DEFINED CONFIG AND NOT CONFIG STREQUAL "")
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
run_step("configure consumer" "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${build}" ${configure_args})

# The package must have come from the prefix we just installed, not from anywhere else.
file(STRINGS "${build}/CMakeCache.txt" xgrad_dir_line REGEX "^xgrad_DIR:")
string(REGEX REPLACE "^xgrad_DIR:[A-Z]+=" "" xgrad_dir "${xgrad_dir_line}")
file(REAL_PATH "${prefix}" real_prefix)
if(EXISTS "${xgrad_dir}")
  file(REAL_PATH "${xgrad_dir}" xgrad_dir)
endif()
string(FIND "${xgrad_dir}/" "${real_prefix}/" pos)
if(NOT pos EQUAL 0)
  message(FATAL_ERROR "[install_consumer] FAILED: the consumer found xgrad in '${xgrad_dir}', "
                      "not in the fresh install prefix '${real_prefix}'")
endif()

run_step("build consumer" "${CMAKE_COMMAND}" --build "${build}" ${config_args})

# find_built(<var> <build dir> <name>): the executable <name> that a build put in <build dir>
# (single-config generators) or <build dir>/<config> (multi-config ones); fails when absent.
function(find_built var dir name)
  if(CMAKE_HOST_WIN32)
    string(APPEND name ".exe")
  endif()
  foreach(candidate "${dir}/${name}" "${dir}/${CONFIG}/${name}")
    if(EXISTS "${candidate}" AND NOT IS_DIRECTORY "${candidate}")
      set(${var} "${candidate}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "[install_consumer] FAILED: the build found no executable '${name}' in ${dir}")
endfunction()

# 3. Run it.
find_built(exe "${build}" consumer)
run_step("run consumer" "${exe}")
message(STATUS "[install_consumer] consumer output:\n${step_output}")

# 4. The tutorial's project, as docs/tutorial.md builds it.
if(DEFINED TUTORIAL_SOURCE_DIR AND NOT TUTORIAL_SOURCE_DIR STREQUAL "")
  set(tutorial_build "${WORK_DIR}/tutorial")
  run_step("configure tutorial" "${CMAKE_COMMAND}" -S "${TUTORIAL_SOURCE_DIR}" -B "${tutorial_build}" ${configure_args})
  run_step("build tutorial" "${CMAKE_COMMAND}" --build "${tutorial_build}" ${config_args})
  find_built(tutorial_exe "${tutorial_build}" my_cnn)
  if(EXISTS "${TUTORIAL_DATA_DIR}/train-images-idx3-ubyte.gz")
    run_step("run tutorial" "${tutorial_exe}" "${TUTORIAL_DATA_DIR}" 512 1)
    message(STATUS "[install_consumer] tutorial output:\n${step_output}")
    if(NOT step_output MATCHES "test accuracy: " OR NOT EXISTS "${WORK_DIR}/my_cnn.safetensors")
      message(FATAL_ERROR "[install_consumer] FAILED: the tutorial printed no test accuracy or wrote no checkpoint")
    endif()
  else()
    message(STATUS "[install_consumer] no Fashion-MNIST at '${TUTORIAL_DATA_DIR}': the tutorial was built, not run")
  endif()
endif()
message(STATUS "[install_consumer] OK")
