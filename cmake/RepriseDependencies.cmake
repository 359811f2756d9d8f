# Third-party dependencies, all from distribution packages (never vendored):
#   Boost.Intrusive (libboost-dev) and xxHash's header (libxxhash-dev) for reprise::reprise;
#   OpenSSL libcrypto (libssl-dev) for the opt-in reprise::sha256 only.
find_package(Boost 1.74 REQUIRED CONFIG)
include(RepriseXxhash)
if(NOT TARGET reprise::xxhash)
  message(FATAL_ERROR "reprise: xxhash.h not found (Debian: libxxhash-dev); set reprise_XXHASH_INCLUDE_DIR")
endif()
find_package(OpenSSL COMPONENTS Crypto)
