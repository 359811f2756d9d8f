# Third-party dependencies, all from distribution packages (never vendored):
#   Boost.Intrusive (libboost-dev) and xxHash's header (libxxhash-dev) for reprise::reprise;
#   OpenSSL libcrypto (libssl-dev) for the opt-in reprise::sha256 only;
#   hiredis (libhiredis-dev), found with pkg-config, for the opt-in reprise::redis only;
#   simdjson (libsimdjson-dev) for the opt-in reprise::hf_config (and reprise-sim's trace reader).
find_package(Boost 1.74 REQUIRED CONFIG)
include(RepriseXxhash)
if(NOT TARGET reprise::xxhash)
  message(FATAL_ERROR "reprise: xxhash.h not found (Debian: libxxhash-dev); set reprise_XXHASH_INCLUDE_DIR")
endif()
find_package(OpenSSL COMPONENTS Crypto)
find_package(simdjson CONFIG QUIET)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND AND NOT TARGET PkgConfig::reprise_hiredis)
  # GLOBAL: reprise::redis is a static library, so its users link hiredis too, from any directory (an
  # engine that adds this tree with add_subdirectory).
  pkg_check_modules(reprise_hiredis QUIET IMPORTED_TARGET GLOBAL hiredis)
endif()
