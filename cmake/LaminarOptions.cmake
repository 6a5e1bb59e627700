# Compiler flags, ccache, sanitizers and CUDA detection.

find_program(LAMINAR_CCACHE ccache)
if(LAMINAR_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER "${LAMINAR_CCACHE}")
  set(CMAKE_CXX_COMPILER_LAUNCHER "${LAMINAR_CCACHE}")
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${LAMINAR_CCACHE}")
endif()

set(LAMINAR_WARNINGS -Wall -Wextra -Wshadow -Wnon-virtual-dtor)
if(LAMINAR_WERROR)
  list(APPEND LAMINAR_WARNINGS -Werror)
endif()

if(LAMINAR_SANITIZE AND NOT LAMINAR_SANITIZE MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
  message(FATAL_ERROR "LAMINAR_SANITIZE='${LAMINAR_SANITIZE}': expected address,undefined or thread")
endif()
if(LAMINAR_SANITIZE)
  add_compile_options(-fsanitize=${LAMINAR_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${LAMINAR_SANITIZE})
endif()

# CUDA: AUTO turns it on when a CUDA compiler is found; a CPU-only build must always work.
set(LAMINAR_CUDA_ENABLED OFF)
if(NOT LAMINAR_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # Hopper (H100/H200); override with -DCMAKE_CUDA_ARCHITECTURES
    endif()
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 flag for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(LAMINAR_CUDA_ENABLED ON)
  elseif(LAMINAR_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LAMINAR_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
