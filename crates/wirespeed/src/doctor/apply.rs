//! `doctor --apply` and `--persist`: make the safe, reversible changes the findings list (each
//! printed, with an undo script written first), or write them as sysctl.d / udev snippets.
