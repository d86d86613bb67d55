/* A stand-in for NVIDIA's libnvidia-ptxjitcompiler.so.1: the fake libcuda.so.1 only needs to find
 * it with dlopen, as the real driver does before it JIT-compiles PTX. */
int fake_ptx_jit_compiler_present = 1;
