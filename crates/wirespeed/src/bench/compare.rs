//! wirespeed against iperf3 over the same points. Not built yet.
