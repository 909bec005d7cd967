/* An MPI job for the job-report tests (tests/mpi.rs): each rank r allocates (r + 1) MiB
 * in one malloc from main and keeps it (the program's own unit holds exactly that), then
 * joins an MPI_Allreduce of the kept sizes. With the argument "abort", rank 2 calls abort()
 * right after the reduction while the others wait in MPI_Barrier: the launcher then ends
 * them. Build: mpicc -O1 -g mpi_ranks.c -o mpi_ranks
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    size_t size = (size_t)(rank + 1) << 20;
    char *kept = malloc(size);
    if (kept == NULL) {
        return 1;
    }
    memset(kept, rank, size);
    long mine = (long)size, total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (argc > 1 && strcmp(argv[1], "abort") == 0 && rank == 2) {
        abort();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    /* `kept` is never freed: it is still live at the end. */
    return kept[0] == (char)rank && total > 0 ? 0 : 2;
}
