# Run at build time (cmake -P) by src/version: writes OUTPUT from INPUT with
# the project version and the git revision of SOURCE_DIR. configure_file
# leaves OUTPUT untouched when nothing changed, so nothing relinks.
# Inputs: INPUT, OUTPUT, SOURCE_DIR, VERSION, and optionally REVISION
# (LOCKD_GIT_REVISION at configure time: a packager's fixed revision).
set(LOCKD_VERSION_NUMBER "${VERSION}")
set(LOCKD_GIT_REVISION "${REVISION}")
if(LOCKD_GIT_REVISION STREQUAL "")
  find_program(GIT_EXECUTABLE git)
  if(GIT_EXECUTABLE)
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse --short=7 HEAD
                    OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE rev_status ERROR_QUIET)
    if(rev_status EQUAL 0 AND NOT rev STREQUAL "")
      set(LOCKD_GIT_REVISION "${rev}")
      # Tracked files changed since the commit: say so, the binary is not it.
      execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" diff-index --quiet HEAD --
                      RESULT_VARIABLE dirty ERROR_QUIET)
      if(NOT dirty EQUAL 0)
        string(APPEND LOCKD_GIT_REVISION "-dirty")
      endif()
    endif()
  endif()
endif()
if(LOCKD_GIT_REVISION STREQUAL "")
  set(LOCKD_VERSION_FULL "${LOCKD_VERSION_NUMBER}")
else()
  # "-dirty" becomes ".dirty": semver build metadata is dot-separated.
  string(REPLACE "-" "." meta "${LOCKD_GIT_REVISION}")
  set(LOCKD_VERSION_FULL "${LOCKD_VERSION_NUMBER}+g${meta}")
endif()
configure_file("${INPUT}" "${OUTPUT}" @ONLY)
