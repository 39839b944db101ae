// The one clock the producer and the worker processes share, in milliseconds with
// sub-millisecond precision: the wall clock at each process's start plus the monotonic
// time since. Two processes on one machine read the same wall clock, so a timestamp
// taken in one can be subtracted from one taken in the other (Date.now() would do too,
// but only to the millisecond, which is most of a pickup).
export const now = () => performance.timeOrigin + performance.now();
