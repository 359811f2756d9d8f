# Third-party dependencies of reprise::reprise, all from distribution packages (never vendored):
#   Boost.Intrusive (libboost-dev), xxHash (libxxhash-dev), OpenSSL libcrypto for SHA-256 (libssl-dev).
find_package(Boost 1.74 REQUIRED CONFIG)
find_package(xxHash REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
