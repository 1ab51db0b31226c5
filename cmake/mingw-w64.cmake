# Cross-compiling for 64-bit Windows with mingw-w64 (Debian's
# gcc-mingw-w64-x86-64). Used by scripts/build-windows.sh.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(_triple x86_64-w64-mingw32)

# The distribution default thread model; everything is linked statically.
find_program(CMAKE_C_COMPILER NAMES ${_triple}-gcc REQUIRED)
find_program(CMAKE_CXX_COMPILER NAMES ${_triple}-g++)
find_program(CMAKE_RC_COMPILER NAMES ${_triple}-windres)
find_program(CMAKE_AR NAMES ${_triple}-ar REQUIRED)
find_program(CMAKE_RANLIB NAMES ${_triple}-ranlib REQUIRED)

# the cross toolchain's own files, and the dependencies that
# scripts/build-windows.sh built (-DCORDON_WIN_DEPS=prefix)
set(CMAKE_FIND_ROOT_PATH /usr/${_triple})
if(CORDON_WIN_DEPS)
  list(APPEND CMAKE_FIND_ROOT_PATH ${CORDON_WIN_DEPS})
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Tests and try_run() run under Wine when it is installed.
find_program(_wine NAMES wine64 wine)
if(_wine)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${_wine})
endif()
