//! Reading the system into findings: socket buffers, the NIC, interrupts, CPUs, the stack, the
//! process and the disk, each set against the target stream.
