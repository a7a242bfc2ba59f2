/* Writes a 64x48 YCCK JPEG (Adobe APP14 transform 2) from raw CMYK on stdin. */
#include <stdio.h>
#include <jpeglib.h>
int main(void) {
  static unsigned char px[64 * 48 * 4];
  if (fread(px, 1, sizeof px, stdin) != sizeof px) return 1;
  struct jpeg_compress_struct c; struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e); jpeg_create_compress(&c); jpeg_stdio_dest(&c, stdout);
  c.image_width = 64; c.image_height = 48; c.input_components = 4; c.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&c); jpeg_set_colorspace(&c, JCS_YCCK); jpeg_set_quality(&c, 90, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) { JSAMPROW r = px + c.next_scanline * 64 * 4; jpeg_write_scanlines(&c, &r, 1); }
  jpeg_finish_compress(&c); jpeg_destroy_compress(&c); return 0;
}
