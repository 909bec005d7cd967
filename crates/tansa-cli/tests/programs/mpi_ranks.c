/* An MPI job in which one rank aborts: rank r allocates (r+1) MiB (kept), all ranks
 * reduce, and with an argument rank 2 calls abort(), so that mpiexec kills the others.
 * Built with: mpicc -g -O1 mpi_ranks.c -o mpi_ranks
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
char *volatile keep;
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t mib = (size_t)(rank + 1);
    char *p = malloc(mib << 20); keep = p;
    memset(p, 1, mib << 20);
    int x = rank, sum = 0;
    MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 2 && argc > 1) { abort(); }
    sleep(argc > 1 ? 3 : 0);
    MPI_Finalize();
    return 0;
}
