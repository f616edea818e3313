/*
 * cuda_abi.h — the few CUDA runtime types device_cuda.c uses, declared as the runtime's ABI
 * lays them out, for builds without the toolkit's headers (without TIDE_HAVE_CUDA_H).
 *
 * cudaPointerAttributes grew in CUDA 13.0 (four fields, 24 bytes, until 12.x; the same
 * four and `long reserved[8]`, 88 bytes, from 13.0), and a runtime writes the whole of its
 * own struct, so this one is 13.0's: a 12.x runtime writes its first 24 bytes. Callers
 * hand the runtime a buffer of CUDA_ATTR_ROOM bytes anyway (device_cuda.c), so that a
 * runtime newer than the headers a build saw cannot write past it either.
 */
#ifndef TIDE_CUDA_ABI_H
#define TIDE_CUDA_ABI_H

/* Room handed to cudaPointerGetAttributes, whatever the headers say the struct is. */
#define CUDA_ATTR_ROOM 256

#ifndef TIDE_HAVE_CUDA_H
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
    long reserved[8]; /* CUDA 13.0 */
};
enum cudaMemcpyKind { cudaMemcpyDefault = 4 };
enum cudaMemcpySrcAccessOrder { cudaMemcpySrcAccessOrderStream = 1 };
enum cudaMemLocationType { cudaMemLocationTypeInvalid = 0 };
struct cudaMemLocation {
    enum cudaMemLocationType type;
    int id;
};
struct cudaMemcpyAttributes {
    enum cudaMemcpySrcAccessOrder srcAccessOrder;
    struct cudaMemLocation srcLocHint;
    struct cudaMemLocation dstLocHint;
    unsigned int flags;
};
#define cudaSuccess 0
#define cudaErrorInsufficientDriver 35
#define cudaErrorHostMemoryAlreadyRegistered 712
#define cudaHostRegisterPortable 0x01
#define cudaStreamNonBlocking 0x01
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#endif

#endif
