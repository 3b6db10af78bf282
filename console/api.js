// Calls to Coffer's API: the key travels only in the Authorization header (never in a URL,
// never as a cookie: `credentials: 'omit'`), so a cross-site page cannot act as the user.

/** An RFC 9457 problem (or a network failure) as one line: "403 forbidden — detail". */
export class ApiError extends Error {
  constructor({status, code, title, detail}) {
    super(detail || title || code);
    this.status = status;
    this.code = code;
    this.title = title;
    this.detail = detail;
  }

  get line() {
    const head = this.status ? `${this.status} ${this.code}` : this.code;
    const text = this.detail || this.title;
    return text ? `${head} — ${text}` : head;
  }

  static async from(response) {
    let body = null;
    const type = response.headers.get('Content-Type') ?? '';
    if (type.includes('json')) {
      try { body = await response.json(); } catch { body = null; }
    }
    return new ApiError({
      status: response.status,
      code: typeof body?.code === 'string' ? body.code : `http${response.status}`,
      title: typeof body?.title === 'string' ? body.title : response.statusText,
      detail: typeof body?.detail === 'string' ? body.detail : '',
    });
  }

  static network(error) {
    return new ApiError({status: 0, code: 'networkError', detail: `the server did not answer (${error?.message ?? error})`});
  }
}

/** A problem or any other error as one line of text. */
export function problemLine(error) {
  if (error instanceof ApiError) return error.line;
  return `error — ${error?.message ?? error}`;
}

/**
 * `/v1/…` plus the query's non-empty values, %-encoded (never `+` for a space: Coffer reads
 * queries as RFC 3986, so `+` would stay a plus sign).
 */
export function url(path, query) {
  const pairs = [];
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value !== undefined && value !== null && value !== '') pairs.push(`${encodeURIComponent(key)}=${encodeURIComponent(String(value))}`);
  }
  return pairs.length ? `${path}?${pairs.join('&')}` : path;
}

/** One path segment of an identifier. Coffer ids are A–Z a–z 0–9 . _ - (nothing to encode). */
export function segment(id) {
  if (!/^[A-Za-z0-9._-]{1,128}$/.test(id) || id === '.' || id === '..') {
    throw new ApiError({status: 0, code: 'invalidIdentifier', detail: 'ids are 1–128 characters of A–Z a–z 0–9 . _ - (not "." or "..")'});
  }
  return id;
}

export class Api {
  #key;
  #onUnauthenticated;

  constructor(key, {onUnauthenticated} = {}) {
    this.#key = key;
    this.#onUnauthenticated = onUnauthenticated;
  }

  /** The raw response of a successful request; a problem is thrown as ApiError. */
  async request(method, path, {query, json, headers, signal} = {}) {
    const init = {
      method,
      headers: {Authorization: `Bearer ${this.#key}`, Accept: 'application/json, application/problem+json', ...headers},
      credentials: 'omit',
      cache: 'no-store',
      redirect: 'error',
      referrerPolicy: 'no-referrer',
      signal,
    };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers['Content-Type'] = 'application/json';
    }
    // A read the server turned away for now (503 auditBusy or busy) is asked again after its
    // Retry-After (1–5 s), up to 3 times: the audit pages share a few places per server.
    for (let tries = 1; ; tries++) {
      let response;
      try {
        response = await fetch(url(path, query), init);
      } catch (error) {
        if (error?.name === 'AbortError') throw error;
        throw ApiError.network(error);
      }
      if (response.ok) return response;
      const problem = await ApiError.from(response);
      if (problem.status === 401 && this.#onUnauthenticated) this.#onUnauthenticated(problem);
      if (method === 'GET' && problem.status === 503 && ['auditBusy', 'busy'].includes(problem.code) && tries < 3) {
        const seconds = Math.min(Math.max(Number.parseInt(response.headers.get('Retry-After') ?? '1', 10) || 1, 1), 5);
        await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
        if (signal?.aborted) throw new DOMException('aborted', 'AbortError');
        continue;
      }
      throw problem;
    }
  }

  async get(path, query, options) {
    const response = await this.request('GET', path, {query, ...options});
    return response.json();
  }

  async put(path, json) {
    const response = await this.request('PUT', path, {json});
    return response.json();
  }

  async delete(path) {
    await this.request('DELETE', path);
  }

  /** A download through fetch (the key stays in a header), handed to the browser as a file. */
  async download(path, query, fileName) {
    const response = await this.request('GET', path, {query, headers: {Accept: '*/*'}});
    const blob = await response.blob();
    const href = URL.createObjectURL(blob);
    const a = document.createElement('a');
    a.href = href;
    a.download = fileName;
    a.hidden = true;
    document.body.append(a);
    a.click();
    a.remove();
    // Give the browser time to start reading the blob before it is released.
    setTimeout(() => URL.revokeObjectURL(href), 60_000);
    return blob.size;
  }

  /**
   * PUT a file with XMLHttpRequest (fetch reports no upload progress). `onProgress(loaded, total)`.
   * Resolves with the parsed 2xx body; rejects with ApiError.
   */
  upload(path, query, file, {headers, onProgress, onAbortable} = {}) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open('PUT', url(path, query));
      xhr.withCredentials = false;
      xhr.setRequestHeader('Authorization', `Bearer ${this.#key}`);
      xhr.setRequestHeader('Accept', 'application/json, application/problem+json');
      for (const [key, value] of Object.entries(headers ?? {})) xhr.setRequestHeader(key, value);
      xhr.responseType = 'text';
      xhr.upload.addEventListener('progress', (event) => onProgress?.(event.loaded, event.lengthComputable ? event.total : file.size));
      xhr.addEventListener('load', () => {
        let body = null;
        try { body = JSON.parse(xhr.responseText); } catch { body = null; }
        if (xhr.status >= 200 && xhr.status < 300) {
          resolve(body);
          return;
        }
        const problem = new ApiError({
          status: xhr.status,
          code: typeof body?.code === 'string' ? body.code : `http${xhr.status}`,
          title: typeof body?.title === 'string' ? body.title : xhr.statusText,
          detail: typeof body?.detail === 'string' ? body.detail : '',
        });
        if (problem.status === 401 && this.#onUnauthenticated) this.#onUnauthenticated(problem);
        reject(problem);
      });
      xhr.addEventListener('error', () => reject(ApiError.network(new Error('the upload failed on the network'))));
      xhr.addEventListener('abort', () => reject(new ApiError({status: 0, code: 'cancelled', detail: 'the upload was cancelled'})));
      onAbortable?.(() => xhr.abort());
      xhr.send(file);
    });
  }
}
