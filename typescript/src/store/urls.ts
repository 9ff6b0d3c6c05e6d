/**
 * URLs that name several Redis nodes, as the Python package reads them
 * (ledger_bus/store/redis/connection.py, `hosts_of`): `redis+cluster://[USER:PASS@]H:P,H2:P2/0`,
 * the seeds of a Redis Cluster, in the form of its `redis+sentinel://H:P,H2:P2/MASTER/DB`.
 * WHATWG's URL parser takes one host only, so the list is read here and the rest of the URL
 * (credentials, path, query) by `URL`, with the first node standing in for the list.
 */

import { InvalidInput } from "../model/errors.js";

export interface Node {
  readonly host: string;
  readonly port: number;
}

export interface NodesUrl {
  /** The URL with its first node alone: its credentials, path and query as `URL` reads them. */
  readonly url: URL;
  /** Every node, in the URL's order; an IPv6 host without its brackets, as ioredis takes it. */
  readonly nodes: Node[];
}

// SCHEME://AUTHORITY REST: the authority ends at the first "/", "?" or "#", as RFC 3986 has it.
const SPLIT = /^([A-Za-z][A-Za-z0-9+.-]*:)\/\/([^/?#]*)(.*)$/s;
// One node: an IPv6 address in brackets or a name or IPv4 address, then ":PORT" if it has one.
const NODE = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+))(?::([0-9]+))?$/;

/**
 * The nodes a URL names between its credentials and its path (`what`, e.g. "a cluster seed",
 * for the error), and the URL as `URL` reads it. A node without a port is at `defaultPort`.
 * InvalidInput in one line naming the URL (its password hidden) for an empty node or host, or
 * a port that is no number from 1 to 65535: before any connection is tried.
 */
export function nodesUrl(given: string, what: string, defaultPort = 6379): NodesUrl {
  const parts = SPLIT.exec(given);
  if (parts === null) throw new InvalidInput(`not a URL: '${shown(given)}'`);
  const [, scheme = "", authority = "", rest = ""] = parts;
  const at = authority.lastIndexOf("@");
  const credentials = authority.slice(0, at + 1);
  const items = authority.slice(at + 1).split(",");
  const nodes = items.map((item): Node => {
    const node = NODE.exec(item);
    const port = node?.[3] === undefined ? defaultPort : Number(node[3]);
    const host = node?.[1] ?? node?.[2];
    if (host === undefined || !(port >= 1 && port <= 65535)) {
      throw new InvalidInput(`${what} is host:port, got '${item}' in '${shown(given)}'`);
    }
    return { host, port };
  });
  let url: URL;
  try {
    url = new URL(`${scheme}//${credentials}${items[0] ?? ""}${rest}`);
  } catch {
    throw new InvalidInput(`not a URL: '${shown(given)}'`);
  }
  return { url, nodes };
}

/** The URL as an error names it: its password, if any, hidden. */
export function shown(given: string): string {
  const parts = SPLIT.exec(given);
  if (parts === null) return given;
  const [, scheme = "", authority = "", rest = ""] = parts;
  const at = authority.lastIndexOf("@");
  const colon = authority.indexOf(":");
  if (at < 0 || colon < 0 || colon > at) return given;
  return `${scheme}//${authority.slice(0, colon)}:***${authority.slice(at)}${rest}`;
}
