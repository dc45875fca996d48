# Install rules and the CMake package for xgrad.
#
# After `cmake --install <build> --prefix <prefix>` a user project can do
#
#   find_package(xgrad REQUIRED)
#   target_link_libraries(app PRIVATE xgrad::xgrad)
#
# Installed: the xgrad library, the public headers (<floor>/include/xgrad/ of base, core, nn and
# train, and the generated umbrella headers; backends/ headers are internal), and
# <libdir>/cmake/xgrad/{xgradConfig,xgradConfigVersion,xgradTargets*}.cmake.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(XGRAD_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/xgrad"
    CACHE STRING "Where to install xgradConfig.cmake, relative to the install prefix")
mark_as_advanced(XGRAD_INSTALL_CMAKEDIR)

# Static builds: OpenBLAS is a PRIVATE dependency of libxgrad, but a static library does not
# carry its own dependencies, so CMake puts it into the link interface of xgrad (as the plain
# path, or as $<LINK_ONLY:...>). Debian's OpenBLASConfig.cmake only provides
# OpenBLAS_LIBRARIES (absolute paths), which would be baked into the installed targets file.
# Instead, keep the paths for the build tree and refer to the interface target xgrad::openblas
# in the installed package; xgradConfig.cmake creates that target from the consumer's own
# find_dependency(OpenBLAS).
get_target_property(_xgrad_type xgrad TYPE)
if(_xgrad_type STREQUAL "STATIC_LIBRARY")
  set(XGRAD_SHARED_BOOL OFF)
  set(XGRAD_LIBRARY_KIND static)
  get_target_property(_xgrad_iface xgrad INTERFACE_LINK_LIBRARIES)
  if(NOT _xgrad_iface)
    set(_xgrad_iface "")
  endif()
  set(_xgrad_new_iface "")
  set(_xgrad_replaced OFF)
  foreach(_item IN LISTS _xgrad_iface)
    set(_is_openblas OFF)
    foreach(_lib IN LISTS OpenBLAS_LIBRARIES)
      if("${_item}" STREQUAL "${_lib}" OR "${_item}" STREQUAL "$<LINK_ONLY:${_lib}>")
        set(_is_openblas ON)
      endif()
    endforeach()
    if(_is_openblas)
      list(APPEND _xgrad_new_iface "$<BUILD_INTERFACE:${_item}>")
      set(_xgrad_replaced ON)
    else()
      list(APPEND _xgrad_new_iface "${_item}")
    endif()
  endforeach()
  if(_xgrad_replaced)
    list(APPEND _xgrad_new_iface "$<INSTALL_INTERFACE:$<LINK_ONLY:xgrad::openblas>>")
    set_property(TARGET xgrad PROPERTY INTERFACE_LINK_LIBRARIES "${_xgrad_new_iface}")
  endif()
  unset(_xgrad_iface)
  unset(_xgrad_new_iface)
  unset(_xgrad_replaced)
  unset(_is_openblas)
else()
  set(XGRAD_SHARED_BOOL ON)
  set(XGRAD_LIBRARY_KIND shared)
endif()
unset(_xgrad_type)

install(TARGETS xgrad
  EXPORT xgradTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# (No INCLUDES DESTINATION: the target's INSTALL_INTERFACE include directory already says it.)
# The libraries libxgrad loads when first used, beside it (where it looks for them first): the
# CUDA backend's, and the MPI plugin (train/CMakeLists.txt).
foreach(_xgrad_plugin xgrad_cuda_library xgrad_mpi_library)
  if(TARGET ${_xgrad_plugin})
    install(TARGETS ${_xgrad_plugin} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endforeach()
unset(_xgrad_plugin)

# Public headers: every floor's include/xgrad/ and the generated umbrellas, merged into
# <includedir>/xgrad/.
foreach(_xgrad_dir ${PROJECT_SOURCE_DIR}/base/include ${PROJECT_SOURCE_DIR}/core/include ${PROJECT_SOURCE_DIR}/nn/include
                   ${PROJECT_SOURCE_DIR}/train/include ${XGRAD_GENERATED_INCLUDE_DIR})
  install(DIRECTORY ${_xgrad_dir}/xgrad DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
endforeach()
unset(_xgrad_dir)

install(EXPORT xgradTargets
  NAMESPACE xgrad::
  FILE xgradTargets.cmake
  DESTINATION ${XGRAD_INSTALL_CMAKEDIR})

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/xgradConfig.cmake.in
  ${PROJECT_BINARY_DIR}/xgradConfig.cmake
  INSTALL_DESTINATION ${XGRAD_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/xgradConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/xgradConfig.cmake
  ${PROJECT_BINARY_DIR}/xgradConfigVersion.cmake
  DESTINATION ${XGRAD_INSTALL_CMAKEDIR})
