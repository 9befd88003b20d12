import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * Where the service may connect on a customer's behalf (http tool connectors, webhooks). Loopback,
 * private, link-local (cloud metadata at 169.254.169.254 included), carrier-grade NAT, multicast,
 * documentation and reserved ranges are refused unless the tool or webhook allows private
 * networks. The check runs on the address the socket actually connects to (a `lookup` hook), so a
 * hostname that resolves to 127.0.0.1 is refused like the literal.
 */
const refusedIPv4 = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24], // the deprecated 6to4 relay anycast (RFC 7526)
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  refusedIPv4.addSubnet(network, prefix, 'ipv4');
}

/**
 * IPv6 is judged by what is allowed rather than by what is not: only global unicast (2000::/3)
 * reaches hosts on the internet. Everything else is refused, among it loopback and unspecified,
 * IPv4-compatible `::a.b.c.d` (::/96, deprecated), IPv4-translated `::ffff:0:a.b.c.d` (RFC 2765,
 * obsolete), the local-use NAT64 prefix 64:ff9b:1::/48 (an operator's own translator, which may map
 * to anything), discard-only 100::/64, SRv6 5f00::/16, unique local fc00::/7, link-local
 * fe80::/10, site-local fec0::/10 and multicast ff00::/8.
 */
const globalUnicastIPv6 = new BlockList();
globalUnicastIPv6.addSubnet('2000::', 3, 'ipv6');

/** Special ranges inside global unicast. */
const refusedIPv6 = new BlockList();
for (const [network, prefix] of [
  // IETF protocol assignments (Teredo 2001::/32, benchmarking, ORCHID, AMT, anycast services): none
  // is a host a tool or webhook runs on, and Teredo's embedded IPv4 is the client's NAT.
  ['2001::', 23],
  ['2001:db8::', 32], // documentation
  // 6to4: the embedded IPv4 is the site's router, not the host the packet ends at, so checking it
  // says nothing about the destination; 6to4 is deprecated (RFC 7526).
  ['2002::', 16],
  ['3fff::', 20], // documentation (RFC 9637)
] as const) {
  refusedIPv6.addSubnet(network, prefix, 'ipv6');
}

/** The eight 16-bit words of an IPv6 address that `isIP` accepted (zone already removed). */
function ipv6Words(address: string): number[] {
  let text = address;
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number);
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const words = (part: string) => (part ? part.split(':').map((word) => parseInt(word, 16)) : []);
  const [head, tail] = text.split('::');
  if (tail === undefined) return words(head);
  const [before, after] = [words(head), words(tail)];
  return [...before, ...Array<number>(8 - before.length - after.length).fill(0), ...after];
}

/**
 * The IPv4 address an IPv6 address stands for, where the IPv4 policy decides: IPv4-mapped
 * `::ffff:a.b.c.d` (how dual-stack sockets and resolvers present IPv4 peers) and the NAT64
 * well-known prefix `64:ff9b::a.b.c.d` (RFC 6052; DNS64 on IPv6-only networks gives every IPv4
 * site such an address, so refusing the whole range would cut those deployments off the IPv4
 * internet, while the translator sends the packet to exactly the embedded address).
 */
function embeddedIPv4(words: number[]): string | undefined {
  const zeros = (from: number, to: number) => words.slice(from, to).every((word) => word === 0);
  const mapped = zeros(0, 5) && words[5] === 0xffff;
  const nat64 = words[0] === 0x64 && words[1] === 0xff9b && zeros(2, 6);
  if (!mapped && !nat64) return undefined;
  return [words[6] >> 8, words[6] & 0xff, words[7] >> 8, words[7] & 0xff].join('.');
}

export class AddressRefusedError extends Error {
  readonly code = 'ADDRESS_REFUSED';
}

export function isRefusedAddress(address: string): boolean {
  const bare = address.replace(/%.*$/, '');
  const family = isIP(bare);
  if (family === 4) return refusedIPv4.check(bare, 'ipv4');
  if (family !== 6) return true;
  const ipv4 = embeddedIPv4(ipv6Words(bare));
  if (ipv4) return refusedIPv4.check(ipv4, 'ipv4');
  return !globalUnicastIPv6.check(bare, 'ipv6') || refusedIPv6.check(bare, 'ipv6');
}

/** A `lookup` for http.request that refuses forbidden addresses after resolution. */
export function guardedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
      if (error) return callback(error, '', 0);
      const usable = allowPrivate ? addresses : addresses.filter((a) => !isRefusedAddress(a.address));
      if (!usable.length) {
        return callback(new AddressRefusedError(`${hostname} resolves to a private or reserved address`), '', 0);
      }
      if ((options as { all?: boolean }).all)
        return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, usable);
      callback(null, usable[0].address, usable[0].family);
    });
  };
}

/** IP literals skip `lookup`, so they are checked before any connection is attempted. */
export function checkLiteralHost(hostname: string, allowPrivate: boolean): void {
  const bare = hostname.replace(/^\[|\]$/g, '');
  if (isIP(bare) && !allowPrivate && isRefusedAddress(bare)) {
    throw new AddressRefusedError(`${bare} is a private or reserved address`);
  }
}

/**
 * Whether a URL host is refused without resolving it: private or reserved IP literals (as the URL
 * parser normalised them, so `127.1` and `2130706433` are 127.0.0.1) and the names RFC 6761 reserves
 * for loopback (`localhost`, `*.localhost`). Other names are only known at connection time.
 */
export function isRefusedHost(hostname: string): boolean {
  const bare = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (isIP(bare)) return isRefusedAddress(bare);
  const name = bare.replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}
