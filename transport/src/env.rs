//! Settings read from the environment, alike for every backend: a variable that is unset
//! or blank takes its default, and a value that does not parse, or lies outside its range,
//! is an error naming the variable, the value and what it should be.

use std::str::FromStr;
use std::time::Duration;

/// `name`'s value, trimmed; `None` when it is unset or blank.
pub(crate) fn var(name: &str) -> Option<String> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_owned())
}

/// `name` as a `T` that `ok` accepts: `Ok(None)` when unset or blank, an error saying that
/// the value "is not {what}" when it does not parse or `ok` refuses it.
pub(crate) fn parsed<T: FromStr>(
    name: &str,
    what: &str,
    ok: impl Fn(&T) -> bool,
) -> Result<Option<T>, String> {
    parse(name, var(name).as_deref(), what, ok)
}

/// A whole number of `units` (`unit` makes it a duration, `Duration::from_micros` say).
pub(crate) fn duration(
    name: &str,
    unit: fn(u64) -> Duration,
    units: &str,
) -> Result<Option<Duration>, String> {
    Ok(parsed::<u64>(name, &format!("a number of {units}"), |_| true)?.map(unit))
}

/// `name` as a switch: `Ok(None)` when unset or blank; `1`, `true`, `on`, `yes` and `0`,
/// `false`, `off`, `no` (any case) turn it on and off; anything else is an error.
pub(crate) fn switch(name: &str) -> Result<Option<bool>, String> {
    parse_switch(name, var(name).as_deref())
}

/// [`switch`] of a value already looked up.
fn parse_switch(name: &str, value: Option<&str>) -> Result<Option<bool>, String> {
    value
        .map(|v| match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => Ok(true),
            "0" | "false" | "off" | "no" => Ok(false),
            _ => Err(format!("{name}={v:?} is not a switch (1 or 0, on or off)")),
        })
        .transpose()
}

/// [`parsed`] of a value already looked up.
fn parse<T: FromStr>(
    name: &str,
    value: Option<&str>,
    what: &str,
    ok: impl Fn(&T) -> bool,
) -> Result<Option<T>, String> {
    value
        .map(|v| {
            v.parse::<T>()
                .ok()
                .filter(|t| ok(t))
                .ok_or_else(|| format!("{name}={v:?} is not {what}"))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_parses_within_its_range_or_is_an_error_naming_the_variable() {
        let slots = |v| {
            parse::<usize>("SLOTS", v, "a number in 2..=1024", |n| {
                (2..=1024).contains(n)
            })
        };
        assert_eq!(slots(None), Ok(None));
        assert_eq!(slots(Some("16")), Ok(Some(16)));
        assert_eq!(
            slots(Some("1")),
            Err("SLOTS=\"1\" is not a number in 2..=1024".to_owned())
        );
        assert_eq!(
            slots(Some("many")),
            Err("SLOTS=\"many\" is not a number in 2..=1024".to_owned())
        );
    }

    #[test]
    fn a_switch_is_on_off_unset_or_an_error_naming_the_variable() {
        let zc = |v| parse_switch("ZERO_COPY", v);
        assert_eq!(zc(None), Ok(None));
        for on in ["1", "true", "On", "YES"] {
            assert_eq!(zc(Some(on)), Ok(Some(true)), "{on}");
        }
        for off in ["0", "false", "OFF", "no"] {
            assert_eq!(zc(Some(off)), Ok(Some(false)), "{off}");
        }
        assert_eq!(
            zc(Some("2")),
            Err("ZERO_COPY=\"2\" is not a switch (1 or 0, on or off)".to_owned())
        );
    }
}
