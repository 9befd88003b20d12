import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * Where the service may connect on a customer's behalf (http tool connectors, webhooks). Loopback,
 * private, link-local (cloud metadata at 169.254.169.254 included), carrier-grade NAT, multicast
 * and reserved ranges are refused unless the tool or webhook allows private networks. The check
 * runs on the address the socket actually connects to (a `lookup` hook), so a hostname that
 * resolves to 127.0.0.1 is refused like the literal.
 */
const refused = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  refused.addSubnet(network, prefix, 'ipv4');
}
for (const [network, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  refused.addSubnet(network, prefix, 'ipv6');
}

export class AddressRefusedError extends Error {
  readonly code = 'ADDRESS_REFUSED';
}

export function isRefusedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return refused.check(address, 'ipv4');
  if (family === 6) {
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    if (mapped) return refused.check(mapped[1], 'ipv4');
    return refused.check(address, 'ipv6');
  }
  return true;
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
      if ((options as { all?: boolean }).all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, usable);
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
