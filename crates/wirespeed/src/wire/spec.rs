//! Format specifications as one string: `NAME[,KEY=VALUE]...`, e.g. `counter,size=8800,order=be`.
//!
//! Every [`Format`] can print its own spec ([`Format::spec`]) and [`parse`] builds it again, so a
//! recording's sidecar names the exact format its data were checked against and `verify` can
//! re-check a file without being told how it was made.

use super::{ByteOrder, Counter, Format};
use std::sync::Arc;

/// A spec's name and its `KEY=VALUE` pairs, in order.
pub type Parts<'a> = (&'a str, Vec<(&'a str, &'a str)>);

/// Split `name,k=v,k=v` into the name and its key/value pairs.
pub fn split(spec: &str) -> Result<Parts<'_>, String> {
    let mut parts = spec.split(',').map(str::trim);
    let name = parts.next().filter(|n| !n.is_empty()).ok_or_else(|| "empty format spec".to_string())?;
    let mut kv = Vec::new();
    for p in parts {
        let (k, v) = p.split_once('=').ok_or_else(|| format!("'{p}' in format spec '{spec}' is not KEY=VALUE"))?;
        kv.push((k.trim(), v.trim()));
    }
    Ok((name, kv))
}

/// Build a format from its spec string.
pub fn parse(spec: &str) -> Result<Arc<dyn Format>, String> {
    let (name, kv) = split(spec)?;
    match name {
        "counter" => {
            let mut size = None;
            let mut order = ByteOrder::Be;
            for (k, v) in kv {
                match k {
                    "size" => size = Some(v.parse::<usize>().map_err(|_| format!("size '{v}' is not a number"))?),
                    "order" => order = ByteOrder::parse(v)?,
                    _ => return Err(format!("unknown key '{k}' for the counter format (size, order)")),
                }
            }
            Ok(match size {
                Some(n) => Arc::new(Counter::new(n, order)?),
                None => Arc::new(Counter::any_len(order)),
            })
        }
        _ => Err(format!("unknown format '{name}' in spec '{spec}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_round_trips() {
        for f in [
            Arc::new(Counter::new(1080, ByteOrder::Le).unwrap()) as Arc<dyn Format>,
            Arc::new(Counter::any_len(ByteOrder::Be)),
        ] {
            let g = parse(&f.spec()).unwrap();
            assert_eq!(g.spec(), f.spec());
            assert_eq!(g.fixed_len(), f.fixed_len());
        }
        assert!(parse("counter,size=12").unwrap_err().contains("multiple of 8"));
        assert!(parse("counter,bogus=1").unwrap_err().contains("unknown key"));
        assert!(parse("nope").unwrap_err().contains("unknown format"));
        assert!(parse("counter,size").unwrap_err().contains("KEY=VALUE"));
    }
}
