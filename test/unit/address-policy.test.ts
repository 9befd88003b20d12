import {
  AddressRefusedError,
  addressRefusal,
  checkLiteralHost,
  guardedLookup,
  hostRefusal,
  isNeverReachable,
  isRefusedAddress,
  isRefusedHost,
  type NetworkAccess,
  PrivateNetworks,
  PrivateNetworksError,
} from '../../src/lib/address-policy.js';
import { outboundUrlError } from '../../src/lib/outbound-http.js';

const loopbackOpened = PrivateNetworks.parse('127.0.0.0/8');
const access = (privateNetworks: PrivateNetworks, allowPrivateNetwork: boolean): NetworkAccess => ({
  privateNetworks,
  allowPrivateNetwork,
});

describe('address policy (pure functions)', () => {
  test.each([
    '127.0.0.1',
    '127.255.255.254',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '255.255.255.255',
    '::1',
    '::',
    'fe80::1',
    'fd00::1',
    'fc00::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:169.254.169.254',
    '192.0.2.1', // documentation
    '198.51.100.1',
    '203.0.113.1',
    '192.88.99.1', // 6to4 relay anycast
    '198.18.0.1', // benchmarking
    // NAT64 (64:ff9b::/96): the IPv4 policy applies to the embedded address
    '64:ff9b::127.0.0.1',
    '64:ff9b::7f00:1',
    '64:ff9b::a9fe:a9fe',
    '64:ff9b::10.0.0.1',
    '64:ff9b:1::808:808', // local-use NAT64 (RFC 8215): refused whole
    // 6to4 (2002::/16): refused whole, whatever the embedded IPv4
    '2002:7f00:1::1',
    '2002:a9fe:a9fe::1',
    '2002:808:808::1',
    // IPv4-compatible (::/96) and IPv4-translated (::ffff:0:0:0/96): refused whole
    '::127.0.0.1',
    '::7f00:1',
    '::8.8.8.8',
    '::ffff:0:127.0.0.1',
    '::ffff:0:8.8.8.8',
    'fec0::1', // site-local
    'feff::1',
    'fe80::1%eth0', // with a zone
    '2001::1', // Teredo
    '2001:2::1', // benchmarking
    '2001:db8::1', // documentation
    '3fff::1', // documentation (RFC 9637)
    '100::1', // discard-only
    '5f00::1', // SRv6
    '1::', // reserved, outside global unicast
    'not-an-address',
  ])('isRefusedAddress(%s) is true', (address) => {
    expect(isRefusedAddress(address)).toBe(true);
  });

  test.each([
    '93.184.216.34',
    '2606:2800::1',
    '8.8.8.8',
    '172.32.0.1',
    '100.128.0.1',
    '::ffff:93.184.216.34',
    '::ffff:5db8:d822',
    '64:ff9b::93.184.216.34', // NAT64 of a public address: how DNS64 networks reach IPv4 sites
    '64:ff9b::808:808',
    '2001:4860:4860::8888', // outside 2001::/23
    '2a00:1450:4001::1',
  ])('isRefusedAddress(%s) is false', (address) => {
    expect(isRefusedAddress(address)).toBe(false);
  });

  test.each([
    ['http://127.1/', true],
    ['http://0x7f.0.0.1/', true],
    ['http://0177.0.0.1/', true],
    ['http://2130706433/', true],
    ['http://[0:0:0:0:0:ffff:127.0.0.1]/', true],
    ['http://[::FFFF:A9FE:A9FE]/', true],
    ['http://[0064:ff9b:0000::7f00:0001]/', true],
    ['http://[::ffff:0:7f00:1]/', true],
    ['http://[FEC0::1]/', true],
    ['http://sub.LOCALHOST./', true],
    ['http://[64:ff9b::5db8:d822]/', false],
    ['http://localhost.example.com/', false],
  ])('isRefusedHost of the parsed %s is %s', (url, refused) => {
    expect(isRefusedHost(new URL(url).hostname)).toBe(refused);
  });

  test('checkLiteralHost refuses private literals (bracketed too) unless opened by both, and leaves hostnames to the lookup', () => {
    const closed = access(PrivateNetworks.none, true);
    expect(() => checkLiteralHost('127.0.0.1', closed)).toThrow(AddressRefusedError);
    expect(() => checkLiteralHost('[::1]', access(loopbackOpened, true))).toThrow(AddressRefusedError);
    expect(() => checkLiteralHost('[::ffff:7f00:1]', access(loopbackOpened, false))).toThrow(AddressRefusedError);
    expect(() => checkLiteralHost('169.254.169.254', access(PrivateNetworks.parse('0.0.0.0/0'), true))).toThrow(
      AddressRefusedError,
    );
    expect(() => checkLiteralHost('127.0.0.1', access(loopbackOpened, true))).not.toThrow();
    expect(() => checkLiteralHost('[::ffff:7f00:1]', access(loopbackOpened, true))).not.toThrow();
    expect(() => checkLiteralHost('93.184.216.34', closed)).not.toThrow();
    expect(() => checkLiteralHost('tools.example.com', closed)).not.toThrow();
  });

  test('guardedLookup refuses a name that resolves only to loopback, unless the deployment and the configuration both open it', async () => {
    const resolve = (through: NetworkAccess, all: boolean) =>
      new Promise<{ error: Error | null; address: unknown }>((done) =>
        guardedLookup(through)('localhost', { all } as never, (error: Error | null, address: unknown) =>
          done({ error, address }),
        ),
      );
    const openedBoth = access(PrivateNetworks.parse('127.0.0.0/8,::1/128'), true);
    for (const refusedBy of [access(PrivateNetworks.none, true), access(openedBoth.privateNetworks, false)]) {
      for (const all of [false, true]) {
        const refused = await resolve(refusedBy, all);
        expect(refused.error).toBeInstanceOf(AddressRefusedError);
        expect((refused.error as AddressRefusedError).code).toBe('ADDRESS_REFUSED');
      }
    }
    expect((await resolve(access(PrivateNetworks.none, true), false)).error?.message).toMatch(
      /^localhost resolves to a loopback, private or reserved address outside the networks this deployment opens to tenants \(OUTBOUND_PRIVATE_NETWORKS/,
    );
    const allowed = await resolve(openedBoth, false);
    expect(allowed.error).toBeNull();
    expect(isRefusedAddress(allowed.address as string)).toBe(true);
    const allowedAll = await resolve(openedBoth, true);
    expect(allowedAll.error).toBeNull();
    expect(Array.isArray(allowedAll.address)).toBe(true);
  });
});

describe('the deployment boundary (OUTBOUND_PRIVATE_NETWORKS)', () => {
  const everything = PrivateNetworks.parse('0.0.0.0/0, ::/0');

  test.each([
    '169.254.169.254', // AWS, GCP, Azure instance metadata
    '169.254.170.2', // ECS task metadata
    '169.254.0.1',
    'fe80::1',
    'fe80::a9fe:a9fe%eth0',
    'fd00:ec2::254', // AWS instance metadata over IPv6
    '::ffff:169.254.169.254',
    '::ffff:a9fe:a9fe',
    '64:ff9b::169.254.169.254',
  ])('%s is never reachable, even with every network listed and allow_private_network', (address) => {
    expect(isNeverReachable(address)).toBe(true);
    expect(addressRefusal(address, access(everything, true))).toBe('never_reachable');
  });

  test.each([
    ['127.0.0.1', '127.0.0.0/8'],
    ['10.1.2.3', '10.0.0.0/8'],
    ['192.168.1.10', '192.168.1.10'],
    ['::ffff:127.0.0.1', '127.0.0.0/8'],
    ['::1', '::1/128'],
    ['fd12::1', 'fc00::/7'],
    ['10.9.9.9', '0.0.0.0/0'],
  ])('%s is reachable with %s listed and allow_private_network, and with either alone it is not', (address, list) => {
    const listed = PrivateNetworks.parse(list);
    expect(addressRefusal(address, access(listed, true))).toBeUndefined();
    expect(addressRefusal(address, access(listed, false))).toBe('needs_allow_private_network');
    expect(addressRefusal(address, access(PrivateNetworks.none, true))).toBe('not_opened_by_deployment');
  });

  test('a listed range opens only itself; public addresses need no list', () => {
    expect(addressRefusal('10.0.0.1', access(loopbackOpened, true))).toBe('not_opened_by_deployment');
    expect(addressRefusal('128.0.0.1', access(PrivateNetworks.none, false))).toBeUndefined();
    expect(addressRefusal('2606:2800::1', access(PrivateNetworks.none, false))).toBeUndefined();
  });

  test.each(['nonsense', '10.0.0.0/33', '::/129', '10.0.0.0/8/8', '10.0.0.0/x', '300.0.0.0/8', '10.0.0.0/-1'])(
    'OUTBOUND_PRIVATE_NETWORKS entry %s is refused with a message',
    (entry) => {
      expect(() => PrivateNetworks.parse(`127.0.0.0/8, ${entry}`)).toThrow(PrivateNetworksError);
      expect(() => PrivateNetworks.parse(entry)).toThrow(/is not a network: write it as a CIDR/);
    },
  );

  test('an empty list is none; ranges are kept as written', () => {
    expect(PrivateNetworks.parse('')).toBe(PrivateNetworks.none);
    expect(PrivateNetworks.parse(' , ')).toBe(PrivateNetworks.none);
    expect(PrivateNetworks.parse('10.0.0.0/8, 192.168.0.7').ranges).toEqual(['10.0.0.0/8', '192.168.0.7/32']);
  });

  test('hostRefusal judges the loopback names as loopback, and leaves other names to the lookup', () => {
    expect(hostRefusal('localhost', access(PrivateNetworks.none, true))).toBe('not_opened_by_deployment');
    expect(hostRefusal('api.localhost', access(loopbackOpened, false))).toBe('needs_allow_private_network');
    expect(hostRefusal('localhost', access(loopbackOpened, true))).toBeUndefined();
    expect(hostRefusal('localhost', access(PrivateNetworks.parse('::1/128'), true))).toBeUndefined();
    expect(hostRefusal('[fe80::1]', access(everything, true))).toBe('never_reachable');
    expect(hostRefusal('tools.internal', access(PrivateNetworks.none, false))).toBeUndefined();
  });

  test("a saved URL's refusal names OUTBOUND_PRIVATE_NETWORKS and how to open loopback, or allow_private_network, or says never", () => {
    expect(outboundUrlError('http://127.0.0.1:9/x', access(PrivateNetworks.none, true))).toEqual({
      refused: true,
      message:
        'the URL points to a loopback, private or reserved address outside the networks this deployment opens to tenants (OUTBOUND_PRIVATE_NETWORKS, which also needs allow_private_network: true; OUTBOUND_PRIVATE_NETWORKS=127.0.0.0/8 opens loopback for local tools)',
    });
    expect(outboundUrlError('http://127.0.0.1:9/x', access(loopbackOpened, false))?.message).toBe(
      'the URL points to a loopback, private or reserved address; allow_private_network must be true for it',
    );
    expect(outboundUrlError('http://169.254.169.254/latest', access(everything, true))?.message).toBe(
      'the URL points to a link-local address (where cloud metadata services answer), which is never reachable',
    );
    expect(outboundUrlError('http://127.0.0.1:9/x', access(loopbackOpened, true))).toBeUndefined();
    expect(outboundUrlError('ftp://example.com/', access(everything, true))?.refused).toBe(false);
  });
});
