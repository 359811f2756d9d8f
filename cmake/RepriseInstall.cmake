# install() rules and the exported package config: find_package(reprise CONFIG) gives reprise::reprise
# and, when the kernels were built, reprise::kernels.
include(CMakePackageConfigHelpers)

set(REPRISE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/reprise")
set(_reprise_targets reprise)
if(TARGET reprise_state_ops)
  list(APPEND _reprise_targets reprise_state_ops)
endif()
if(TARGET reprise_kernels)
  list(APPEND _reprise_targets reprise_kernels)
  set(REPRISE_HAS_KERNELS ON)
else()
  set(REPRISE_HAS_KERNELS OFF)
endif()

install(DIRECTORY include/reprise DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(TARGETS ${_reprise_targets} EXPORT repriseTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT repriseTargets NAMESPACE reprise:: DESTINATION "${REPRISE_INSTALL_CMAKEDIR}")

configure_package_config_file(cmake/repriseConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/repriseConfig.cmake"
  INSTALL_DESTINATION "${REPRISE_INSTALL_CMAKEDIR}")
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/repriseConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/repriseConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/repriseConfigVersion.cmake"
  cmake/FindxxHash.cmake
  DESTINATION "${REPRISE_INSTALL_CMAKEDIR}")
