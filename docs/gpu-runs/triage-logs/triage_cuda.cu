// Faults for `forgepatch triage` fixtures (docs/gpu-runs/triage-logs/make-triage-logs.sh).
// Error checks in the style of the CUDA samples' helper_cuda.h: they print only the error's
// enum name and number, the form `forgepatch triage` must still recognise.
//   triage_cuda launch          launch a kernel (built for sm_120 only, run on sm_90: code=209)
//   triage_cuda ptx FILE        load a PTX file through the driver API (cuModuleLoadData)
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>

#define checkCudaErrors(val) check_rt((val), #val, __FILE__, __LINE__)
#define checkCuErrors(val) check_drv((val), #val, __FILE__, __LINE__)

static void check_rt(cudaError_t r, const char *what, const char *file, int line) {
  if (r) {
    fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\" \n", file, line, (int)r, cudaGetErrorName(r), what);
    exit(EXIT_FAILURE);
  }
}

static void check_drv(CUresult r, const char *what, const char *file, int line) {
  if (r) {
    const char *name = "?";
    cuGetErrorName(r, &name);
    fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\" \n", file, line, (int)r, name, what);
    exit(EXIT_FAILURE);
  }
}

__global__ void fill(float *out, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = v;
}

int main(int argc, char **argv) {
  if (argc > 1 && argv[1][0] == 'l') {
    float *d = nullptr;
    int n = 1 << 20;
    printf("allocating %d floats\n", n);
    checkCudaErrors(cudaMalloc(&d, n * sizeof(float)));
    fill<<<(n + 255) / 256, 256>>>(d, 1.0f, n);
    checkCudaErrors(cudaGetLastError());
    checkCudaErrors(cudaDeviceSynchronize());
    printf("kernel ran\n");
    return 0;
  }
  if (argc > 2 && argv[1][0] == 'p') {
    FILE *f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 2; }
    static char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    buf[len] = 0;
    fclose(f);
    CUdevice dev; CUcontext ctx; CUmodule mod;
    checkCuErrors(cuInit(0));
    checkCuErrors(cuDeviceGet(&dev, 0));
    checkCuErrors(cuDevicePrimaryCtxRetain(&ctx, dev));
    checkCuErrors(cuCtxSetCurrent(ctx));
    printf("loading %s (%zu bytes)\n", argv[2], len);
    checkCuErrors(cuModuleLoadData(&mod, buf));
    printf("module loaded\n");
    return 0;
  }
  fprintf(stderr, "usage: %s launch | ptx FILE\n", argv[0]);
  return 2;
}
