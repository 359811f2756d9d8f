# install() rules and the exported package config: find_package(reprise CONFIG) gives reprise::reprise,
# reprise::sha256 (component `sha256`), reprise::redis (component `redis`, a static library) when hiredis was
# found, reprise::hf_config (component `hf_config`, a static library) when simdjson was found, reprise::state_ops when the CUDA toolkit's CCCL was found, and
# reprise::kernels when the kernels were built. Also installs LICENSE and pkg-config files.
include(CMakePackageConfigHelpers)

set(REPRISE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/reprise")
set(_reprise_targets reprise)
if(TARGET reprise_sha256)
  list(APPEND _reprise_targets reprise_sha256)
  set(REPRISE_HAS_SHA256 ON)
else()
  set(REPRISE_HAS_SHA256 OFF)
endif()
if(TARGET reprise_redis)
  list(APPEND _reprise_targets reprise_redis)
  set(REPRISE_HAS_REDIS ON)
else()
  set(REPRISE_HAS_REDIS OFF)
endif()
if(TARGET reprise_hf_config)
  list(APPEND _reprise_targets reprise_hf_config)
  set(REPRISE_HAS_HF_CONFIG ON)
else()
  set(REPRISE_HAS_HF_CONFIG OFF)
endif()
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
install(TARGETS ${_reprise_targets} EXPORT repriseTargets ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(EXPORT repriseTargets NAMESPACE reprise:: DESTINATION "${REPRISE_INSTALL_CMAKEDIR}")
install(FILES LICENSE DESTINATION "${CMAKE_INSTALL_DOCDIR}")

configure_package_config_file(cmake/repriseConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/repriseConfig.cmake"
  INSTALL_DESTINATION "${REPRISE_INSTALL_CMAKEDIR}")
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/repriseConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/repriseConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/repriseConfigVersion.cmake"
  cmake/RepriseXxhash.cmake
  cmake/RepriseCudaDialect.cmake
  DESTINATION "${REPRISE_INSTALL_CMAKEDIR}")

# pkg-config, for builds without CMake: `reprise` (header-only host library; the compiler must be in C++20
# mode) and `reprise-sha256` (adds libcrypto). Header-only, so they go to the architecture-independent
# ${datadir}/pkgconfig, and locate the prefix relative to themselves (`cmake --install --prefix` works). The
# kernels and reprise::redis (compiled libraries) are not described: link them through CMake.
foreach(_pc IN ITEMS reprise reprise-sha256)
  if(_pc STREQUAL "reprise-sha256" AND NOT REPRISE_HAS_SHA256)
    continue()
  endif()
  configure_file("cmake/${_pc}.pc.in" "${CMAKE_CURRENT_BINARY_DIR}/${_pc}.pc" @ONLY)
  install(FILES "${CMAKE_CURRENT_BINARY_DIR}/${_pc}.pc" DESTINATION "${CMAKE_INSTALL_DATADIR}/pkgconfig")
endforeach()
