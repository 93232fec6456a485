//! What an outbound call may reach: the operator's allow-list of hosts and
//! ports (`http_allowed_hosts`), the addresses that count as public, and
//! the private ranges the operator opens (`http_allowed_private`).
//!
//! An allow-list entry is one of
//! - `*`: any host, any port (still only public addresses);
//! - `host`: that host on its scheme's default port (80 for `http`, 443
//!   for `https`);
//! - `host:port`: that host on that port only;
//! - `host:*`: that host on any port.
//!
//! `host` is a name (compared without case) or an IP literal (IPv6 in
//! brackets: `[2001:db8::1]:8443`). A name on the list says nothing about
//! the address it resolves to: every address connected is checked again
//! ([`address_allowed`]), so an allowed name that resolves to a loopback
//! or private address is refused unless that address is in
//! `http_allowed_private`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use reqwest::Url;

use super::Refusal;

/// One entry of `http_allowed_hosts`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostRule {
    Any,
    Host { host: String, port: PortRule },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PortRule {
    /// The scheme's default port.
    Default,
    Any,
    Exact(u16),
}

/// The checked allow-list and private ranges.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    hosts: Vec<HostRule>,
    private: Vec<IpNet>,
}

impl Policy {
    /// Parse the operator's settings; the error names the bad entry.
    pub fn new(allowed_hosts: &[String], allowed_private: &[String]) -> Result<Self, String> {
        let hosts = allowed_hosts
            .iter()
            .map(|entry| parse_host_rule(entry))
            .collect::<Result<_, _>>()?;
        let private = allowed_private
            .iter()
            .map(|entry| parse_net(entry))
            .collect::<Result<_, _>>()?;
        Ok(Self { hosts, private })
    }

    /// Whether `url` may be called: http(s), a host and port on the
    /// allow-list and, for an IP literal (which is connected without a
    /// lookup), an allowed address.
    pub fn check(&self, url: &Url) -> Result<(), Refusal> {
        match self.listed(url)? {
            Some(ip) if !self.address_allowed(ip) => Err(Refusal::new(format!(
                "{ip} is not a public address (list it in http_allowed_private to allow it)"
            ))),
            _ => Ok(()),
        }
    }

    /// The URL's IP literal, if any, once its scheme, host and port are
    /// found on the allow-list.
    fn listed(&self, url: &Url) -> Result<Option<IpAddr>, Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::new(format!(
                "`{}` is not an http or https URL",
                url.scheme()
            )));
        }
        let Some(raw) = url.host_str() else {
            return Err(Refusal::new("the URL has no host"));
        };
        // The URL parser has already normalised IP literals (`0x7f.1` is
        // `127.0.0.1`); IPv6 ones come in brackets.
        let literal = raw
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok();
        let name = match literal {
            Some(ip) => ip.to_string(),
            None => raw.to_ascii_lowercase(),
        };
        let port = url.port_or_known_default().unwrap_or(0);
        let listed = self.hosts.iter().any(|rule| match rule {
            HostRule::Any => true,
            HostRule::Host { host, port: p } => {
                *host == name
                    && match p {
                        PortRule::Any => true,
                        PortRule::Default => url.port().is_none(),
                        PortRule::Exact(p) => *p == port,
                    }
            }
        });
        if !listed {
            return Err(Refusal::new(format!(
                "`{raw}:{port}` is not in http_allowed_hosts"
            )));
        }
        Ok(literal)
    }

    /// Whether the allow-list names `url`'s host and port (the address
    /// rules aside).
    pub fn lists(&self, url: &Url) -> bool {
        self.listed(url).is_ok()
    }

    /// Whether a connection to `ip` is allowed: a public address, or one
    /// in a range the operator listed.
    pub fn address_allowed(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        is_public(ip) || self.private.iter().any(|net| net.contains(&ip))
    }
}

fn parse_host_rule(entry: &str) -> Result<HostRule, String> {
    let entry = entry.trim();
    if entry == "*" {
        return Ok(HostRule::Any);
    }
    let bad = || {
        format!(
            "http_allowed_hosts: `{entry}` is not `*`, `host`, `host:port` or `host:*` \
             (IPv6 in brackets)"
        )
    };
    let (host, port) = if let Ok(ip) = entry.parse::<IpAddr>() {
        (ip.to_string(), None)
    } else if let Some(rest) = entry.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or_else(bad)?;
        let ip: Ipv6Addr = ip.parse().map_err(|_| bad())?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(bad)?),
        };
        (ip.to_string(), port)
    } else {
        match entry.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (entry.to_owned(), None),
        }
    };
    let literal = host.parse::<IpAddr>().is_ok();
    if host.is_empty() || (!literal && host.contains(['/', '@', ' ', ':', '*'])) {
        return Err(bad());
    }
    // IP literals compare in the form the URL parser gives them.
    let host = match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host.to_ascii_lowercase(),
    };
    let port = match port {
        None => PortRule::Default,
        Some("*") => PortRule::Any,
        Some(p) => PortRule::Exact(p.parse().map_err(|_| bad())?),
    };
    Ok(HostRule::Host { host, port })
}

/// A CIDR range, or a single address.
fn parse_net(entry: &str) -> Result<IpNet, String> {
    let entry = entry.trim();
    entry
        .parse::<IpNet>()
        .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!("http_allowed_private: `{entry}` is not a CIDR range (e.g. `10.0.0.0/8`)")
        })
}

/// Whether `ip` is a public unicast address: not loopback, private
/// (RFC 1918), shared (CGNAT, 100.64/10), link-local, unique-local
/// (fc00::/7), multicast, unspecified, broadcast, documentation,
/// benchmarking or otherwise reserved. IPv6 forms that embed an IPv4
/// address (mapped, NAT64, 6to4) are judged by the address they embed.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                   // "this network", unspecified
        || a == 10                             // private
        || a == 127                            // loopback
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 169 && b == 254)              // link-local
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0)      // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)      // documentation
        || (a == 192 && b == 88 && c == 99)    // 6to4 relay anycast
        || (a == 192 && b == 168)              // private
        || (a == 198 && (b == 18 || b == 19))  // benchmarking
        || (a == 198 && b == 51 && c == 100)   // documentation
        || (a == 203 && b == 0 && c == 113)    // documentation
        || a >= 224) // multicast, reserved, broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        // NAT64 (64:ff9b::/96): the IPv4 address in the last 32 bits.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => is_public_v4(embedded(hi, lo)),
        // 6to4 (2002::/16): the IPv4 address in bits 16-48.
        [0x2002, hi, lo, ..] => is_public_v4(embedded(hi, lo)),
        _ => {
            !(ip.is_unspecified()
                || ip.is_loopback()
                || s[0] & 0xfe00 == 0xfc00  // unique local
                || s[0] & 0xffc0 == 0xfe80  // link-local
                || s[0] & 0xffc0 == 0xfec0  // site-local (deprecated)
                || s[0] & 0xff00 == 0xff00  // multicast
                || (s[0] == 0 && s[1..6] == [0; 5]) // IPv4-compatible (deprecated), ::/96
                || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64 local use
                || (s[0] == 0x100 && s[1..4] == [0; 3]) // discard-only
                || (s[0] == 0x2001 && s[1] < 0x200) // IETF assignments, Teredo
                || (s[0] == 0x2001 && s[1] == 0xdb8)) // documentation
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(hosts: &[&str], private: &[&str]) -> Policy {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Policy::new(&own(hosts), &own(private)).unwrap()
    }

    fn allows(p: &Policy, url: &str) -> bool {
        p.check(&Url::parse(url).unwrap()).is_ok()
    }

    #[test]
    fn an_entry_names_a_host_and_a_port() {
        let p = policy(
            &[
                "api.example.com",
                "crm.example.com:8443",
                "any.example.com:*",
            ],
            &[],
        );
        assert!(allows(&p, "https://api.example.com/x"));
        assert!(allows(&p, "http://API.example.com:80/x"));
        assert!(!allows(&p, "https://api.example.com:8443/x"));
        assert!(allows(&p, "https://crm.example.com:8443/"));
        assert!(!allows(&p, "https://crm.example.com/"));
        assert!(allows(&p, "http://any.example.com:1234/"));
        assert!(!allows(&p, "https://other.example.com/"));
        assert!(!allows(&p, "ftp://api.example.com/"));
        assert!(allows(&policy(&["*"], &[]), "https://anything.example:9/"));
    }

    #[test]
    fn ip_literals_must_also_be_allowed_addresses() {
        let p = policy(&["*"], &[]);
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://10.1.2.3/",
            "http://169.254.169.254/latest/meta-data",
            "http://100.64.0.1/",
            "http://[fd00::1]/",
            "http://0.0.0.0/",
        ] {
            assert!(!allows(&p, url), "{url} is allowed");
        }
        assert!(allows(&p, "http://93.184.215.14/"));
        let open = policy(&["127.0.0.1:*"], &["127.0.0.0/8"]);
        assert!(allows(&open, "http://127.0.0.1:8080/"));
    }

    #[test]
    fn non_public_ranges_are_refused_unless_listed() {
        let p = policy(&[], &["10.0.0.0/8", "fd12::1"]);
        for ip in [
            "127.0.0.1",
            "192.168.1.1",
            "172.16.0.1",
            "172.31.255.255",
            "100.127.0.1",
            "169.254.1.1",
            "224.0.0.1",
            "255.255.255.255",
            "0.0.0.0",
            "::",
            "::1",
            "fe80::1",
            "fc00::1",
            "ff02::1",
            "::ffff:192.168.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
        ] {
            assert!(!p.address_allowed(ip.parse().unwrap()), "{ip} is allowed");
        }
        for ip in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "10.9.8.7",
            "fd12::1",
        ] {
            assert!(p.address_allowed(ip.parse().unwrap()), "{ip} is refused");
        }
    }

    #[test]
    fn bad_entries_are_named() {
        for bad in ["http://x", "x:port", "[::1", "a b", ""] {
            let err = Policy::new(&[bad.to_string()], &[]).unwrap_err();
            assert!(err.contains("http_allowed_hosts"), "{bad}: {err}");
        }
        assert!(Policy::new(&[], &["10.0.0.0/33".into()]).is_err());
        assert!(Policy::new(&["[::1]:8080".into(), "::1".into(), "[::1]:*".into()], &[]).is_ok());
    }
}
