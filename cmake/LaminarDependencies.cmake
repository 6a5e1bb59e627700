# Third-party libraries, all from Debian packages (scripts/setup.sh installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(dnnl REQUIRED)
find_package(OpenMP REQUIRED)  # oneDNN's threading runtime; kernels pin it to one thread per call
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
find_package(Protobuf REQUIRED)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)  # UCP: bulk weight transfer (docs/architecture.md)
if(LAMINAR_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# Gloo (libgloo-dev): CPU collectives of data-parallel actor ranks over its TCP transport
# (trainer/collective_gloo.cc). Debian ships a GlooConfig.cmake whose target is named plain `gloo`
# and is only described for RelWithDebInfo, so it is found by path instead.
find_path(LAMINAR_GLOO_INCLUDE_DIR gloo/transport/tcp/device.h)
find_library(LAMINAR_GLOO_LIBRARY gloo)
if(NOT LAMINAR_GLOO_INCLUDE_DIR OR NOT LAMINAR_GLOO_LIBRARY)
  message(FATAL_ERROR "Gloo with its TCP transport not found (apt-get install libgloo-dev)")
endif()
add_library(Gloo::gloo UNKNOWN IMPORTED)
set_target_properties(Gloo::gloo PROPERTIES
  IMPORTED_LOCATION "${LAMINAR_GLOO_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${LAMINAR_GLOO_INCLUDE_DIR}")

# NCCL: GPU collectives (trainer/collective_nccl.cc), looked for beside the CUDA toolkit when CUDA
# is enabled. Without it the build goes on and the 'nccl' collective backend says it is absent.
set(LAMINAR_NCCL_ENABLED OFF)
if(LAMINAR_CUDA_ENABLED)
  find_path(LAMINAR_NCCL_INCLUDE_DIR nccl.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(LAMINAR_NCCL_LIBRARY nccl
    HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(LAMINAR_NCCL_INCLUDE_DIR AND LAMINAR_NCCL_LIBRARY)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${LAMINAR_NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${LAMINAR_NCCL_INCLUDE_DIR}")
    set(LAMINAR_NCCL_ENABLED ON)
    message(STATUS "laminar: NCCL ${LAMINAR_NCCL_LIBRARY}")
  else()
    message(STATUS "laminar: NCCL not found (nccl.h, libnccl): the 'nccl' collective backend is "
                   "left out")
  endif()
endif()
