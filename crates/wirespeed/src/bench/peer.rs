//! Peers measured in the same placement as wirespeed's own points (iperf3; sockperf where it
//! fits), for `wirespeed bench compare`. Not built yet.
