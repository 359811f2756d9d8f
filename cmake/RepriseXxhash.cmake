# reprise::xxhash — xxHash used header-only (include/reprise/keys/xxh3_hasher.hpp defines XXH_INLINE_ALL), so
# only xxhash.h is needed (Debian: libxxhash-dev) and nothing is linked. Included by Reprise's own build and by
# the installed package config; defines no variable outside the `reprise_` prefix.
if(NOT TARGET reprise::xxhash)
  find_path(reprise_XXHASH_INCLUDE_DIR NAMES xxhash.h DOC "Directory holding xxhash.h (libxxhash-dev)")
  mark_as_advanced(reprise_XXHASH_INCLUDE_DIR)
  if(reprise_XXHASH_INCLUDE_DIR)
    add_library(reprise::xxhash INTERFACE IMPORTED)
    set_target_properties(reprise::xxhash PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${reprise_XXHASH_INCLUDE_DIR}")
  endif()
endif()
