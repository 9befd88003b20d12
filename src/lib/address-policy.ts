import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * Where the service may connect on a tenant's behalf (docs/decisions/0062-the-deployment-boundary.md):
 * tools and their definition reads, webhooks, single sign-on, client metadata documents. Public
 * addresses are reachable. Loopback, private, carrier-grade NAT, multicast, documentation and
 * reserved ranges are reachable only where the deployment lists them (OUTBOUND_PRIVATE_NETWORKS)
 * and the tenant's configuration asks for them (`allow_private_network`): tenants are untrusted,
 * so neither alone opens the deployment's own network. Link-local addresses, the cloud metadata
 * services among them, are never reachable. The check runs on the address the socket actually
 * connects to (a `lookup` hook), so a hostname that resolves to 127.0.0.1 is judged like the literal.
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

/**
 * Never reachable, whatever the deployment lists: link-local (169.254.0.0/16, fe80::/10), where
 * cloud metadata services answer (169.254.169.254, ECS's 169.254.170.2) with the host's own
 * credentials, and AWS's IPv6 metadata address fd00:ec2::254. A list as wide as 0.0.0.0/0 is a
 * deployment opening its private networks, not its machines' identities.
 */
const neverReachable = new BlockList();
neverReachable.addSubnet('169.254.0.0', 16, 'ipv4');
neverReachable.addSubnet('fe80::', 10, 'ipv6');
neverReachable.addAddress('fd00:ec2::254', 'ipv6');

/** The address as the policy judges it: without a zone, and an embedded IPv4 address as itself. */
function judgedAddress(address: string): { address: string; family: 'ipv4' | 'ipv6' } | undefined {
  const bare = address.replace(/%.*$/, '');
  const family = isIP(bare);
  if (family === 4) return { address: bare, family: 'ipv4' };
  if (family !== 6) return undefined;
  const ipv4 = embeddedIPv4(ipv6Words(bare));
  return ipv4 ? { address: ipv4, family: 'ipv4' } : { address: bare, family: 'ipv6' };
}

/** Whether an address is loopback, private, link-local or otherwise not a host on the internet (anything that is not an address included). */
export function isRefusedAddress(address: string): boolean {
  const judged = judgedAddress(address);
  if (!judged) return true;
  if (judged.family === 'ipv4') return refusedIPv4.check(judged.address, 'ipv4');
  return !globalUnicastIPv6.check(judged.address, 'ipv6') || refusedIPv6.check(judged.address, 'ipv6');
}

/** Whether an address is one no configuration may reach (link-local, cloud metadata). */
export function isNeverReachable(address: string): boolean {
  const judged = judgedAddress(address);
  return !judged || neverReachable.check(judged.address, judged.family);
}

export class PrivateNetworksError extends Error {}

/**
 * The deployment's OUTBOUND_PRIVATE_NETWORKS: the private or reserved ranges tenants may reach,
 * comma-separated CIDRs (a bare address is a range of one). Empty by default.
 */
export class PrivateNetworks {
  static readonly none = new PrivateNetworks([]);

  private readonly list = new BlockList();

  private constructor(readonly ranges: readonly string[]) {
    for (const range of ranges) {
      const [network, prefix] = range.split('/');
      const family = isIP(network) === 4 ? 'ipv4' : 'ipv6';
      this.list.addSubnet(network, Number(prefix), family);
    }
  }

  static parse(text: string | undefined): PrivateNetworks {
    const entries = (text ?? '')
      .split(',')
      .map((entry) => entry.trim())
      .filter(Boolean);
    return entries.length ? new PrivateNetworks(entries.map(cidrOf)) : PrivateNetworks.none;
  }

  includes(address: string): boolean {
    const judged = judgedAddress(address);
    return judged !== undefined && this.list.check(judged.address, judged.family);
  }
}

/** `network/prefix`, checked; a bare address is a range of one. */
function cidrOf(entry: string): string {
  const [network, prefixText, extra] = entry.split('/');
  const family = isIP(network);
  const width = family === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? width : Number(prefixText);
  if (!family || extra !== undefined || !/^\d{1,3}$/.test(prefixText ?? String(width)) || prefix > width) {
    throw new PrivateNetworksError(
      `"${entry}" is not a network: write it as a CIDR (10.0.0.0/8, 127.0.0.0/8, fd00::/8) or an address`,
    );
  }
  return `${network}/${prefix}`;
}

/** What one outbound connection may reach: the deployment's list, and what the tenant's configuration asks. */
export interface NetworkAccess {
  /** The deployment's OUTBOUND_PRIVATE_NETWORKS. */
  privateNetworks: PrivateNetworks;
  /** The configuration's `allow_private_network` (a tool's, a webhook's, single sign-on's). */
  allowPrivateNetwork: boolean;
}

/** Why an address may not be reached: never, or not by this configuration, or not on this deployment. */
export type AddressRefusal = 'never_reachable' | 'needs_allow_private_network' | 'not_opened_by_deployment';

export function addressRefusal(address: string, access: NetworkAccess): AddressRefusal | undefined {
  if (isNeverReachable(address)) return 'never_reachable';
  if (!isRefusedAddress(address)) return undefined;
  if (!access.privateNetworks.includes(address)) return 'not_opened_by_deployment';
  return access.allowPrivateNetwork ? undefined : 'needs_allow_private_network';
}

/**
 * The refusal in words, after `subject` ("127.0.0.1 is", "tools.internal resolves to"). It says
 * what would open the address without saying which ranges the deployment opened: that list is
 * the deployment's, not the tenant's to read.
 */
export function refusalMessage(subject: string, refusal: AddressRefusal): string {
  switch (refusal) {
    case 'never_reachable':
      return `${subject} a link-local address (where cloud metadata services answer), which is never reachable`;
    case 'needs_allow_private_network':
      return `${subject} a loopback, private or reserved address; allow_private_network must be true for it`;
    case 'not_opened_by_deployment':
      return (
        `${subject} a loopback, private or reserved address outside the networks this deployment opens to tenants ` +
        '(OUTBOUND_PRIVATE_NETWORKS, which also needs allow_private_network: true; ' +
        'OUTBOUND_PRIVATE_NETWORKS=127.0.0.0/8 opens loopback for local tools)'
      );
  }
}

/** A `lookup` for http.request that refuses forbidden addresses after resolution. */
export function guardedLookup(access: NetworkAccess): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
      if (error) return callback(error, '', 0);
      const refusals = addresses.map((a) => addressRefusal(a.address, access));
      const usable = addresses.filter((_, index) => refusals[index] === undefined);
      if (!usable.length) {
        const refusal = refusals.find((r) => r !== undefined) ?? 'never_reachable';
        return callback(new AddressRefusedError(refusalMessage(`${hostname} resolves to`, refusal)), '', 0);
      }
      if ((options as { all?: boolean }).all)
        return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, usable);
      callback(null, usable[0].address, usable[0].family);
    });
  };
}

/** IP literals skip `lookup`, so they are checked before any connection is attempted. */
export function checkLiteralHost(hostname: string, access: NetworkAccess): void {
  const bare = hostname.replace(/^\[|\]$/g, '');
  const refusal = isIP(bare) ? addressRefusal(bare, access) : undefined;
  if (refusal) throw new AddressRefusedError(refusalMessage(`${bare} is`, refusal));
}

/** The names RFC 6761 reserves for loopback: `localhost` and `*.localhost`. */
function isLoopbackName(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

/**
 * Whether a URL host is refused without resolving it: private or reserved IP literals (as the URL
 * parser normalised them, so `127.1` and `2130706433` are 127.0.0.1) and the names RFC 6761 reserves
 * for loopback (`localhost`, `*.localhost`). Other names are only known at connection time.
 */
export function isRefusedHost(hostname: string): boolean {
  const bare = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return isIP(bare) ? isRefusedAddress(bare) : isLoopbackName(bare);
}

/**
 * Why a URL host may not be reached, known without DNS (saving a URL): an IP literal as the
 * policy judges it, and the loopback names as loopback (127.0.0.1 or ::1, whichever is opened).
 * Other names are judged on the addresses they resolve to, when connecting.
 */
export function hostRefusal(hostname: string, access: NetworkAccess): AddressRefusal | undefined {
  const bare = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (isIP(bare)) return addressRefusal(bare, access);
  if (!isLoopbackName(bare)) return undefined;
  const refusals = ['127.0.0.1', '::1'].map((address) => addressRefusal(address, access));
  return refusals.includes(undefined) ? undefined : refusals[0];
}
